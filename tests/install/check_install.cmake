# ctest `install_consumer`: installs the library component of the build tree BUILD into a fresh
# prefix, builds tests/install/consumer against it (find_package(orrery)), runs it, and checks
# that the step time it prints is the one `orrery simulate --json` reports for the same job, and
# that it looks for helper programs in the prefix's libexec/orrery, never in the build tree.
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
string(REPLACE "\n" ";" lines "${out}")
list(POP_FRONT lines library)
list(FIND lines "${WORK}/prefix/libexec/orrery" installed)
if(installed EQUAL -1)
  message(FATAL_ERROR "install_consumer: helper folders ${lines} lack ${WORK}/prefix/libexec/orrery")
endif()
foreach(dir IN LISTS lines)
  if(dir STREQUAL "${BUILD}/cli")
    message(FATAL_ERROR "install_consumer: the installed library looks in the build tree (${dir})")
  endif()
endforeach()
run(${ORRERY} simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 8 --global-batch 8
    --seq 2048 --precision bf16 --json)
string(JSON cli GET "${out}" step_time_s)
if(NOT library STREQUAL cli)
  message(FATAL_ERROR "install_consumer: the installed library says step ${library} s, "
                      "orrery simulate --json ${cli} s")
endif()
message(STATUS "install_consumer: step ${library} s from the installed library and the CLI")

# The installed `orrery` without its des helper says so, naming the folders it searched, instead
# of running the build tree's orrery-des. Installed outside the build tree: code running from
# inside it may use the build tree's helpers (base/CMakeLists.txt).
if(DEFINED ENV{TMPDIR})
  set(tmp $ENV{TMPDIR})
else()
  set(tmp /tmp)
endif()
string(RANDOM LENGTH 12 tag)
set(programs ${tmp}/orrery_install_programs_${tag})
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${programs} --component programs)
file(REMOVE ${programs}/libexec/orrery/orrery-des)
execute_process(COMMAND ${programs}/bin/orrery simulate --model llama3-8b --cluster dgx-h100
                        --nodes 1 --tp 8 --global-batch 8 --seq 2048 --engine des
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE_RECURSE ${programs})
string(FIND "${err}" "cannot find orrery's helper program orrery-des" missing)
string(FIND "${err}" "${BUILD}/cli" build_tree)
if(rc EQUAL 0 OR missing EQUAL -1 OR NOT build_tree EQUAL -1)
  message(FATAL_ERROR "install_consumer: an installed orrery without orrery-des exited ${rc}:\n"
                      "${out}\n${err}")
endif()
message(STATUS "install_consumer: the installed orrery refuses without its helper: ${err}")
