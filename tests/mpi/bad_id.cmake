# cmake -DMPIEXEC=... -DNP_FLAG=-n -DNP=2 -DFLAGS=... -DPOSTFLAGS=... -DEXAMPLE=... -P bad_id.cmake
# Runs mpi_vocab_parallel --bad-id on NP ranks. Passes when the run ends within
# 60 s with exit code 3 and every rank printed the error of its own
# tokpos_op_compose_forward_shard (TOKPOS_ID_OUT_OF_RANGE) naming an id equal
# to the vocabulary size it is outside of; no rank went on to the comparison.
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} ${NP} ${FLAGS} ${EXAMPLE} ${POSTFLAGS} --bad-id
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
message("${out}${err}")
if(NOT rc STREQUAL "3")
  message(FATAL_ERROR "bad id: expected exit code 3 (a tokpos call failed), got '${rc}'")
endif()
math(EXPR last "${NP} - 1")
foreach(r RANGE 0 ${last})
  set(re "rank ${r}: tokpos_op_compose_forward_shard: [^\n]*id ([0-9]+)[^\n]* outside \\[0, ([0-9]+)\\) \\[TOKPOS_ID_OUT_OF_RANGE\\]")
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "bad id: rank ${r} did not print the TOKPOS_ID_OUT_OF_RANGE error of "
                        "tokpos_op_compose_forward_shard naming the id and [0, V)")
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2)
    message(FATAL_ERROR "bad id: rank ${r} names id ${CMAKE_MATCH_1}, expected the id V = ${CMAKE_MATCH_2}")
  endif()
endforeach()
if(out MATCHES "another rank failed|forward: ")
  message(FATAL_ERROR "bad id: a rank's forward succeeded or the ranks went on to the comparison")
endif()
message("bad id: all ${NP} ranks reported TOKPOS_ID_OUT_OF_RANGE and ended")
