# The slurm tests (label slurm), each on a real single-node Slurm that it
# installs (Debian's slurm-wlm and munge, when missing) and starts itself:
# - slurm_requeue: jobscripts/cpu_job.sh with the C example: checkpoint on
#   USR1, requeue, restore, and the same final parameters as an uninterrupted
#   run (tests/slurm/test_requeue.sh says how);
# - slurm_gpu_binding: jobscripts/gpu_job.sh on two stand-in GPUs: one rank per
#   GPU, each seeing all of the job's GPUs (tests/slurm/test_gpu_binding.sh).
# They need root (they start munged, slurmctld and slurmd) and two CPUs, and
# run alone (RUN_SERIAL: other tests would slow the 2-rank jobs past their
# time bounds, and apt-get must not race another install).
if(TARGET burgers_surrogate_c)
  add_test(NAME slurm_requeue
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/test_requeue.sh ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE:burgers_surrogate_c>)
  # The script bounds every wait itself (install, start, each job) well below
  # this timeout, so that it always gets to stop the daemons it started.
  set_tests_properties(slurm_requeue PROPERTIES LABELS slurm RUN_SERIAL TRUE PROCESSORS 2 TIMEOUT 2400)
endif()
add_test(NAME slurm_gpu_binding COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/test_gpu_binding.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(slurm_gpu_binding PROPERTIES LABELS slurm RUN_SERIAL TRUE PROCESSORS 2 TIMEOUT 1500)
