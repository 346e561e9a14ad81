# orrery_embed(<target> <namespace> <files...>): compiles data files (presets) into <target> as
#   std::span<const orrery::EmbeddedFile> <namespace>::embedded_files();
# so presets are ordinary YAML files in the source tree that users can read and copy.
function(orrery_embed target namespace)
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}_embedded.cpp")
  set(files ${ARGN})
  add_custom_command(
    OUTPUT "${out}"
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNAMESPACE=${namespace} "-DFILES=${files}"
            -P "${PROJECT_SOURCE_DIR}/cmake/OrreryEmbedScript.cmake"
    DEPENDS ${files} "${PROJECT_SOURCE_DIR}/cmake/OrreryEmbedScript.cmake"
    COMMENT "Embedding ${target} data files"
    VERBATIM)
  target_sources(${target} PRIVATE "${out}")
endfunction()
