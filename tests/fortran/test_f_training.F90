! Fortran twin of tests/training: gradient accumulation over three
! micro-batches (dmuon_step after each, gradients added into the views)
! against one step on the mean written by hand, and dmuon_zero_grad; a
! learning-rate schedule set from Fortran (the bind(C) mirror's layout
! checked by reading it back through C) and the rates of its steps; metrics
! averaged and summed across ranks by the step; the message callback warned
! by a restore that falls back from a damaged checkpoint to an older one;
! setters and queries with default real and integer kinds, and the signal
! numbers of the module (a SIGUSR1 raised through C reaches the handler).
module f_training_messages
  use, intrinsic :: iso_c_binding
  implicit none
  integer, save :: warnings = 0
contains
  subroutine on_message(level, text, user_data) bind(C)
    integer(c_int), value :: level
    type(c_ptr), value :: text, user_data
    if (level == 1 .and. c_associated(text)) warnings = warnings + 1
  end subroutine on_message
end module f_training_messages

program test_f_training
#include "comm.inc"
  use, intrinsic :: iso_c_binding
  use dmuon
  use ftest
  use f_training_messages
  implicit none
  integer, parameter :: nmicro = 3, nsteps = 3
  COMM_T :: comm
  type(dmuon_context) :: ctx
  type(dmuon_optimizer) :: acc, manual
  type(dmuon_options) :: options
  real(c_float), pointer :: wa(:, :), ga(:, :), ba(:), gba(:), wm(:, :), gm(:, :), bm(:), gbm(:)
  real(c_float) :: wa0(4, 6)
  integer :: rank, mpierr, id, step, m, every, pending, ierr
  type(dmuon_lr_schedule) :: sched, back
  type(dmuon_options) :: now
  integer(c_int64_t) :: taken
  real(c_double), target :: metrics(2)
  real(c_double) :: reduced(2)
  integer :: nranks, pid, unit, count_default
  logical :: requested
  interface
    integer(c_int) function c_raise(sig) bind(C, name="raise")
      import :: c_int
      integer(c_int), value :: sig
    end function
  end interface
  character(len=128) :: dir
  character(len=4096) :: zeros

  call MPI_Init(MPI_IERR_ONLY)
  comm = MPI_COMM_WORLD
  call MPI_Comm_rank(comm, rank MPI_IERR)
  mpierr = 0
  call dmuon_context_create(comm, "cpu", ctx)
  options%max_grad_norm = 0.3d0
  call make(acc)
  call make(manual)
  call dmuon_param_view(acc, 0, wa, ga)
  call dmuon_param_view(acc, 1, ba, gba)
  call dmuon_param_view(manual, 0, wm, gm)
  call dmuon_param_view(manual, 1, bm, gbm)
  call dmuon_set_grad_accumulation(acc, nmicro)

  do step = 1, nsteps
    wa0 = wa
    do m = 1, nmicro
      ga = ga + target_pull(wa, step, m)
      gba = gba + (ba - 0.1 * (m + rank))
      call dmuon_step(acc)
      call dmuon_get_grad_accumulation(acc, every, pending)
      call expect(every == nmicro .and. pending == mod(m, nmicro), "micro-batches counted")
      if (m < nmicro) call expect(all(wa == wa0), "a micro-batch before the last changed nothing")
    end do
    gm = 0
    gbm = 0
    do m = 1, nmicro
      gm = gm + target_pull(wm, step, m)
      gbm = gbm + (bm - 0.1 * (m + rank))
    end do
    gm = gm / nmicro
    gbm = gbm / nmicro
    call dmuon_step(manual)
    call expect(maxval(abs(wa - wm)) < 2e-5, "accumulated Muon step equals the step of the mean")
    call expect(maxval(abs(ba - bm)) < 2e-5, "accumulated AdamW step equals the step of the mean")
    call expect(all(ga == 0) .and. all(gba == 0), "the step zeroed the gradients")
  end do

  ga = 1
  call dmuon_step(acc)  ! one micro-batch of a new cycle
  call dmuon_set_grad_accumulation(acc, 2, ierr)
  call expect_status(ierr, DMUON_ERR_INVALID_VALUE, "changing the setting mid-cycle")
  call dmuon_zero_grad(acc)
  call dmuon_get_grad_accumulation(acc, pending=pending)
  call expect(pending == 0 .and. all(ga == 0), "dmuon_zero_grad clears the views and the cycle")

  ! Warm-up over 2 steps, then linear from 0.1 to 0.02 at step 6.
  sched%kind = DMUON_LR_LINEAR
  sched%base_lr = 0.1d0
  sched%warmup_steps = 2
  sched%total_steps = 6
  sched%final_lr = 0.02d0
  call dmuon_set_lr_schedule(manual, DMUON_KIND_MUON, sched)
  call dmuon_get_lr_schedule(manual, DMUON_KIND_MUON, back, taken)
  call expect(back%kind == DMUON_LR_LINEAR .and. back%base_lr == 0.1d0 .and. back%warmup_steps == 2 .and. &
              back%total_steps == 6 .and. back%final_lr == 0.02d0 .and. back%gamma == 0.1d0 .and. taken == 0, &
              "the schedule reads back field by field")
  do step = 0, 6
    call dmuon_step(manual)
    call dmuon_get_options(manual, now)
    call expect(abs(now%muon_lr - expected_rate(step)) < 1d-15, "scheduled Muon rate")
  end do
  call dmuon_set_lr(manual, DMUON_KIND_MUON, 0.5d0)
  call dmuon_get_lr_schedule(manual, DMUON_KIND_MUON, ierr=ierr)
  call expect_status(ierr, DMUON_ERR_NOT_FOUND, "dmuon_set_lr removes the schedule")

  call MPI_Comm_size(comm, nranks MPI_IERR)
  metrics = [dble(rank + 1), 1d0]
  call dmuon_metrics_submit(manual, metrics, DMUON_METRICS_MEAN)
  call dmuon_step(manual)
  call dmuon_metrics_get(manual, reduced)
  call expect(abs(reduced(1) - (nranks + 1) / 2d0) < 1d-12 .and. abs(reduced(2) - 1d0) < 1d-12, "metrics mean")
  call dmuon_metrics_submit(manual, metrics, DMUON_METRICS_SUM)
  call dmuon_step(manual)
  call dmuon_metrics_get(manual, reduced(1:1))
  call expect(abs(reduced(1) - nranks * (nranks + 1) / 2d0) < 1d-12, "metrics sum")

  ! Two checkpoints, the newer one damaged in its middle: the restore falls
  ! back to the older one and says so through the callback.
  pid = 0
  if (rank == 0) pid = getpid()
  call MPI_Bcast(pid, 1, MPI_INTEGER, 0, comm MPI_IERR)
  write (dir, '("f_training_ckpt_",i0)') pid
  call dmuon_checkpoint_save(manual, trim(dir), 1_c_int64_t)
  call dmuon_step(manual)
  call dmuon_checkpoint_save(manual, trim(dir), 2_c_int64_t)
  if (rank == 0) then
    zeros = repeat(char(0), len(zeros))
    open (newunit=unit, file=trim(dir)//"/ckpt_2.h5", access="stream", form="unformatted", status="old")
    write (unit, pos=8193) zeros
    close (unit)
  end if
  call MPI_Barrier(comm MPI_IERR)
  call dmuon_context_set_message_callback(ctx, c_funloc(on_message))
  call dmuon_checkpoint_restore(manual, trim(dir), taken)
  call expect(taken == 1 .and. warnings == 1, "the fallback restore warned once through the callback")
  call dmuon_context_set_message_callback(ctx, c_null_funptr)
  call dmuon_checkpoint_restore(manual, trim(dir), taken)
  call expect(warnings == 1, "no message without a callback")
  call MPI_Barrier(comm MPI_IERR)
  if (rank == 0) call execute_command_line("rm -rf "//trim(dir))

  ! Default kinds: a default real rate, default integer counts.
  call dmuon_set_lr(manual, DMUON_KIND_ADAM, 0.25)
  call dmuon_set_max_grad_norm(manual, 2.0)
  call dmuon_get_options(manual, now)
  call expect(now%adam_lr == 0.25d0 .and. now%max_grad_norm == 2d0, "setters take a default real")
  call dmuon_get_step_count(manual, count_default)
  call dmuon_get_step_count(manual, taken)
  call expect(count_default == int(taken) .and. count_default > 0, "the step count as a default integer")
  call dmuon_param_numel(manual, 0, count_default)
  call expect(count_default == 24, "the element count as a default integer")
  ! The module's SIGUSR1 is the C library's: raised through C, it reaches the handler.
  call dmuon_install_signal_handler(ctx, DMUON_SIGUSR1)
  call expect(c_raise(DMUON_SIGUSR1) == 0, "raise(SIGUSR1)")
  call dmuon_checkpoint_requested(ctx, requested)
  call expect(requested, "SIGUSR1 set the checkpoint request")
  call expect(DMUON_SIGTERM /= DMUON_SIGUSR1 .and. DMUON_SIGTERM > 0, "SIGTERM is a distinct signal number")

  call dmuon_optimizer_destroy(acc)
  call dmuon_optimizer_destroy(manual)
  call dmuon_context_destroy(ctx)
  call ftest_finish("test_f_training")
  call MPI_Finalize(MPI_IERR_ONLY)

contains

  pure double precision function expected_rate(t)
    integer, intent(in) :: t
    if (t < 2) then
      expected_rate = 0.1d0 * (t + 1) / 2
    else
      expected_rate = 0.1d0 + (0.02d0 - 0.1d0) * min(t - 2, 4) / 4d0
    end if
  end function expected_rate

  subroutine make(opt)
    type(dmuon_optimizer), intent(inout) :: opt
    real(c_float), pointer :: w(:, :), g(:, :)
    integer :: i, j
    call dmuon_optimizer_create(ctx, opt, options)
    call dmuon_register(opt, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [4, 6], id)
    call dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [6], id)
    call dmuon_optimizer_finalize(opt)
    call dmuon_param_view(opt, 0, w, g)
    do j = 1, 6
      do i = 1, 4
        w(i, j) = real(sin(real(i + 7 * j)), c_float)
      end do
    end do
  end subroutine make

  function target_pull(w, step, m) result(g)
    real(c_float), intent(in) :: w(:, :)
    integer, intent(in) :: step, m
    real(c_float) :: g(size(w, 1), size(w, 2))
    integer :: i, j
    do j = 1, size(w, 2)
      do i = 1, size(w, 1)
        g(i, j) = w(i, j) - real(cos(real(i * j + step + 3 * m + 5 * rank)), c_float)
      end do
    end do
  end function target_pull

end program test_f_training
