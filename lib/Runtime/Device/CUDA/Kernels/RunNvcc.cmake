# Runs nvcc and keeps its output (ptxas -v: registers and spills per kernel)
# in a log next to the fatbin; on failure prints the log and fails. Run as
#   cmake -DNVCC=nvcc "-DARGS=a|b|c" -DLOG=out.log -P RunNvcc.cmake
# (arguments joined with "|": a list survives add_custom_command that way).
string(REPLACE "|" ";" ARGS "${ARGS}")
execute_process(COMMAND "${NVCC}" ${ARGS}
                OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
file(WRITE "${LOG}" "${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nvcc failed (${rc}):\n${out}")
endif()
