# The slurm test (label slurm): jobscripts/cpu_job.sh on a real single-node
# Slurm that the test installs (Debian's slurm-wlm and munge, when missing)
# and starts itself: checkpoint on USR1, requeue, restore, and the same final
# parameters as an uninterrupted run (tests/slurm/test_requeue.sh says how).
# Needs root (it starts munged, slurmctld and slurmd) and two CPUs; it runs
# alone (RUN_SERIAL: the two 2-rank jobs would be slowed into its time bounds
# by other tests, and apt-get must not race another install).
if(TARGET burgers_surrogate_c)
  add_test(NAME slurm_requeue
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/test_requeue.sh ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE:burgers_surrogate_c>)
  # The script bounds every wait itself (install, start, each job) well below
  # this timeout, so that it always gets to stop the daemons it started.
  set_tests_properties(slurm_requeue PROPERTIES LABELS slurm RUN_SERIAL TRUE PROCESSORS 2 TIMEOUT 2400)
endif()
