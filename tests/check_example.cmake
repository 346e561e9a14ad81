# One golden example (docs/examples/*.txt): runs the command on the example's first line
# ("$ orrery ARGS", from the repository root) and fails unless its standard output is the rest of
# the file, byte for byte. On a difference the actual output is written to OUT for diffing.
# Variables: EXAMPLE (the file), ORRERY (the binary), ROOT (the repository), OUT (where to write).
file(READ "${EXAMPLE}" text)
string(FIND "${text}" "\n" eol)
if(eol EQUAL -1)
  message(FATAL_ERROR "${EXAMPLE}: no command line")
endif()
string(SUBSTRING "${text}" 0 ${eol} first)
math(EXPR start "${eol} + 1")
string(SUBSTRING "${text}" ${start} -1 expected)
if(NOT first MATCHES "^\\$ orrery ")
  message(FATAL_ERROR "${EXAMPLE}: the first line must be '$ orrery ARGS', got '${first}'")
endif()
string(REGEX REPLACE "^\\$ orrery " "" args "${first}")
separate_arguments(args UNIX_COMMAND "${args}")
execute_process(COMMAND "${ORRERY}" ${args} WORKING_DIRECTORY "${ROOT}"
                OUTPUT_VARIABLE actual ERROR_VARIABLE errors RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${EXAMPLE}: '${first}' exited with ${status}:\n${errors}")
endif()
if(NOT actual STREQUAL expected)
  file(WRITE "${OUT}" "${first}\n${actual}")
  message(FATAL_ERROR "${EXAMPLE}: the output differs from the example; it is in ${OUT} "
                      "(diff the two; if the change is intended, copy it over the example)")
endif()
