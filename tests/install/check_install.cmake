# ctest `install_consumer`: installs the library component of the build tree BUILD into a fresh
# prefix, builds tests/install/consumer against it (find_package(orrery)), runs it, and checks
# that the step time it prints is the one `orrery simulate --json` reports for the same job.
# Arguments: -DBUILD=<build dir> -DSOURCE=<this folder> -DWORK=<scratch dir> -DORRERY=<orrery>
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: `${ARGN}` failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix --component library)
run(${CMAKE_COMMAND} -S ${SOURCE}/consumer -B ${WORK}/build -G Ninja
    -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK}/build)
run(${WORK}/build/consumer)
string(STRIP "${out}" library)
run(${ORRERY} simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 8 --global-batch 8
    --seq 2048 --precision bf16 --json)
string(JSON cli GET "${out}" step_time_s)
if(NOT library STREQUAL cli)
  message(FATAL_ERROR "install_consumer: the installed library says step ${library} s, "
                      "orrery simulate --json ${cli} s")
endif()
message(STATUS "install_consumer: step ${library} s from the installed library and the CLI")
