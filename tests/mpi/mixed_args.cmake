# cmake -DMPIEXEC=... -DNP_FLAG=-n -DFLAGS=... -DPOSTFLAGS=... -DEXAMPLE=... -DBAD_RANK=0|1 -P mixed_args.cmake
# Two ranks with different command lines (mpirun's "A : B"), one of them with
# a bad flag (--pad 0). Passes when the run ends within 60 s with exit code 2,
# the rank with the bad flag named it, and the other rank said it stopped
# because another rank has bad arguments: no rank waits forever in a
# collective that the rank with the bad flag never joins.
set(bad ${EXAMPLE} ${POSTFLAGS} --pad 0)
set(good ${EXAMPLE} ${POSTFLAGS})
if(BAD_RANK STREQUAL "0")
  set(first ${bad})
  set(second ${good})
  set(good_rank 1)
else()
  set(first ${good})
  set(second ${bad})
  set(good_rank 0)
endif()
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} 1 ${FLAGS} ${first} : ${NP_FLAG} 1 ${second}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
message("${out}${err}")
if(NOT rc STREQUAL "2")
  message(FATAL_ERROR "mixed arguments: expected exit code 2 (bad arguments) within 60 s, got '${rc}'")
endif()
if(NOT out MATCHES "rank ${BAD_RANK}: --pad needs an integer >= 1, got '0'")
  message(FATAL_ERROR "mixed arguments: rank ${BAD_RANK} did not name its bad --pad 0")
endif()
if(NOT out MATCHES "rank ${good_rank}: stopping, another rank has bad arguments")
  message(FATAL_ERROR "mixed arguments: rank ${good_rank} did not say that another rank has bad arguments")
endif()
message("mixed arguments: the rank with --pad 0 named it, the other stopped, both ended (exit 2)")
