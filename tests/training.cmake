# What online training adds around the step (issue 21): gradient accumulation
# and zeroing, learning-rate schedules, metrics.
dmuon_add_gtest(test_accumulation SOURCES training/test_accumulation.cpp NPROCS 1 2 LABELS training)
dmuon_add_gtest(test_lr_schedule SOURCES training/test_lr_schedule.cpp NPROCS 1 2 LABELS "training;checkpoint")
dmuon_add_gtest(test_metrics SOURCES training/test_metrics.cpp NPROCS 1 3 LABELS training)
dmuon_add_gtest(test_messages SOURCES training/test_messages.cpp NPROCS 2 LABELS "training;checkpoint")
dmuon_add_gtest(test_master_weights SOURCES training/test_master_weights.cpp NPROCS 1 2 4 LABELS "training;checkpoint")
