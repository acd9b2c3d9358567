# The slurm tests (label slurm), each on a real single-node Slurm that it
# installs (Debian's slurm-wlm and munge, when missing) and starts itself:
# - slurm_requeue_c, slurm_requeue_f: jobscripts/cpu_job.sh with the C and the
#   Fortran example: checkpoint on USR1, requeue, restore, and the same final
#   parameters as an uninterrupted run (tests/slurm/test_requeue.sh says how);
# - slurm_gpu_binding: jobscripts/gpu_job.sh on two stand-in GPUs: one rank per
#   GPU, each seeing all of the job's GPUs, and with per-task binding each its
#   own (tests/slurm/test_gpu_binding.sh);
# - slurm_kill_chain: srun --kill-on-bad-exit ending a job whose rank failed,
#   a singleton chain and an array chain (tests/slurm/test_kill_chain.sh).
# They need root (they start munged, slurmctld and slurmd) and two CPUs, and
# run alone (RUN_SERIAL: other tests would slow the 2-rank jobs past their
# time bounds, and apt-get must not race another install).
# One requeue test per example program: the C one and, when Fortran is built,
# the Fortran one (same protocol, same output lines).
foreach(example IN ITEMS burgers_surrogate_c burgers_surrogate_f)
  if(NOT TARGET ${example})
    continue()
  endif()
  string(REPLACE "burgers_surrogate_" "slurm_requeue_" test_name ${example})
  add_test(NAME ${test_name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/test_requeue.sh ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE:${example}>)
  # The script bounds every wait itself (install, start, each job) well below
  # this timeout, so that it always gets to stop the daemons it started.
  set_tests_properties(${test_name} PROPERTIES LABELS slurm RUN_SERIAL TRUE PROCESSORS 2 TIMEOUT 2400)
endforeach()
add_test(NAME slurm_gpu_binding COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/test_gpu_binding.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(slurm_gpu_binding PROPERTIES LABELS slurm RUN_SERIAL TRUE PROCESSORS 2 TIMEOUT 1500)

# The job-script helper's decision table, every row, with stand-ins for Slurm's
# commands: no Slurm, no root, a few seconds (tests/slurm/test_job_helper.sh).
add_test(NAME slurm_job_helper COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/test_job_helper.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(slurm_job_helper PROPERTIES LABELS "slurm;jobscripts" TIMEOUT 300)

# The job scripts' dry-run mode: the srun lines of every variant (PMI2, per-task
# GPU binding, scratch and striping, chains) and submit_chain.sh's sbatch
# lines; no Slurm needed (tests/slurm/test_dry_run.sh).
add_test(NAME slurm_dry_run COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/test_dry_run.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(slurm_dry_run PROPERTIES LABELS "slurm;jobscripts" TIMEOUT 120)

# kill-on-bad-exit, a singleton chain and an array chain on a real single-node
# Slurm, with the C example (tests/slurm/test_kill_chain.sh); as the requeue tests.
if(TARGET burgers_surrogate_c)
  add_test(NAME slurm_kill_chain COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/test_kill_chain.sh ${PROJECT_SOURCE_DIR}
                                         $<TARGET_FILE:burgers_surrogate_c>)
  set_tests_properties(slurm_kill_chain PROPERTIES LABELS slurm RUN_SERIAL TRUE PROCESSORS 2 TIMEOUT 2400)
endif()
