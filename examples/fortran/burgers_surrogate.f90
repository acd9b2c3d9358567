! The Burgers surrogate example in Fortran: the same simulation, model,
! config file and checkpoints as the C example (examples/c), written the way
! a Fortran code would. Run: mpirun -n 2 burgers_surrogate_f --config=surrogate.cfg
program burgers_surrogate
  use, intrinsic :: iso_c_binding, only: c_float, c_int, c_char, c_null_char, c_int64_t
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi_f08
  use dmuon
  use example_config
  use burgers_sim
  use mlp_model
  implicit none

  integer, parameter :: SIGUSR1 = 10, SIGTERM = 15  ! Linux numbering
  type(surrogate_config) :: cfg
  type(dmuon_context) :: ctx
  type(dmuon_optimizer) :: opt
  type(dmuon_options) :: options
  type(burgers) :: sim
  type(mlp) :: net
  character(len=1024) :: error, config_path
  character(len=16) :: backend
  real(c_float), allocatable :: x(:, :), t(:)
  double precision :: loss_sum(2), global(2), t0, t_log, now, lr_factor
  integer(c_int64_t) :: restored
  integer :: rank, nranks, start, step, done_steps, since_log, ierr, csv, width
  logical :: ok, use_muon, requested, resumed, help, stale
  logical :: checkpointed_on_request = .false.

  interface
    ! POSIX mkdir, for the checkpoint directory (an existing one is fine)
    integer(c_int) function c_mkdir(path, mode) bind(C, name="mkdir")
      import :: c_int, c_char
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int), value :: mode
    end function c_mkdir
  end interface

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  call read_config(cfg, error, help, config_path)
  if (help .or. error /= "") then
    ! Every rank read the same command line and file: rank 0 speaks for all.
    if (rank == 0 .and. help) call print_help(config_path)
    if (rank == 0 .and. .not. help) write (error_unit, '(a)') "burgers_surrogate_f: "//trim(error)//" (try --help)"
    call MPI_Finalize()
    if (help) stop
    stop 2, quiet=.true.
  end if
  use_muon = cfg%optimizer == "muon"
  ! The values were checked alone; this one depends on the rank count.
  call burgers_init(sim, MPI_COMM_WORLD, cfg%nx, cfg%viscosity, max(cfg%stencil, 1), ok)
  if (.not. ok) then
    if (rank == 0) write (error_unit, '("burgers_surrogate_f: --nx=",i0,": too small for ",i0," ranks with --stencil=", &
      & i0," (each rank needs ",i0," points)")') cfg%nx, nranks, cfg%stencil, max(cfg%stencil, 1)
    call MPI_Finalize()
    stop 2, quiet=.true.
  end if

  ! A fresh start must not meet an earlier run's checkpoints: dmuon never
  ! overwrites a checkpoint, so its saves would fail, the last one at the end
  ! of the run. Rank 0 looks (`latest` names the newest checkpoint).
  stale = .false.
  if (cfg%restart == 0 .and. rank == 0) inquire (file=trim(cfg%checkpoint_dir)//"/latest", exist=stale)
  call MPI_Bcast(stale, 1, MPI_LOGICAL, 0, MPI_COMM_WORLD)
  if (stale) then
    if (rank == 0) write (error_unit, '(a)') "burgers_surrogate_f: --restart=0 but --checkpoint_dir="// &
      trim(cfg%checkpoint_dir)//" holds an earlier run's checkpoints: remove them, choose another directory, "// &
      "or --restart=1 to continue"
    call MPI_Finalize()
    stop 2, quiet=.true.
  end if

  ! Every dmuon call below stops the program with dmuon's message if it fails
  ! (no ierr argument), except where a failure is an expected answer or
  ! comes from an option's value.
  call dmuon_context_create(MPI_COMM_WORLD, cfg%backend, ctx, ierr)
  if (failed_anywhere(ierr, "--backend="//trim(cfg%backend))) then
    call MPI_Finalize()
    stop 2, quiet=.true.
  end if
  options%muon_lr = cfg%muon_lr
  options%adam_lr = cfg%adam_lr
  options%muon_weight_decay = cfg%weight_decay
  options%adam_weight_decay = cfg%weight_decay
  options%max_grad_norm = cfg%max_grad_norm
  call dmuon_optimizer_create(ctx, opt, options)
  width = 2 * cfg%stencil + 1
  call mlp_register(net, opt, width, cfg%hidden, cfg%layers, use_muon)
  call dmuon_optimizer_finalize(opt)
  start = 0
  resumed = .false.
  if (cfg%restart /= 0) then
    call dmuon_checkpoint_restore(opt, cfg%checkpoint_dir, restored, ierr)
    if (ierr == DMUON_SUCCESS) then
      resumed = .true.
      start = int(restored)
      if (rank == 0) write (*, '("restored ",a," at step ",i0)') trim(cfg%checkpoint_dir), start
    else if (ierr == DMUON_ERR_NOT_FOUND) then
      ierr = DMUON_SUCCESS
    end if
    if (failed_anywhere(ierr, "--checkpoint_dir="//trim(cfg%checkpoint_dir))) then
      call dmuon_optimizer_destroy(opt)
      call dmuon_context_destroy(ctx)
      call MPI_Finalize()
      stop 1, quiet=.true.
    end if
  end if
  ! Take the views after the restore: a restore may re-plan dmuon's storage,
  ! and views taken before it would then point to freed memory.
  call dmuon_context_backend(ctx, backend)
  call mlp_bind(net, opt, cfg%batch, backend == "cuda")
  if (.not. resumed) call mlp_init(net, cfg%seed)
  call dmuon_install_signal_handler(ctx, SIGUSR1)
  call dmuon_install_signal_handler(ctx, SIGTERM)

  ! The data depend only on the step: replay the simulation up to `start`.
  call burgers_set_initial(sim, cfg%seed, start / cfg%episode)
  call burgers_advance(sim, mod(start, cfg%episode) * cfg%horizon)
  call dmuon_checkpoint_set_attribute(opt, "example", "burgers_surrogate")
  call dmuon_checkpoint_set_attribute(opt, "optimizer", cfg%optimizer)

  if (rank == 0) then
    ierr = c_mkdir(trim(cfg%checkpoint_dir)//c_null_char, int(o'755', c_int))
    if (start > 0) then
      open (newunit=csv, file=cfg%loss_csv, position="append", action="write")
    else
      open (newunit=csv, file=cfg%loss_csv, status="replace", action="write")
      write (csv, '(a)') "step,loss,seconds"
    end if
    write (*, '("burgers surrogate (Fortran): ",i0," ranks, backend ",a,", optimizer ",a,", nx ",i0)') &
      nranks, trim(backend), trim(cfg%optimizer), cfg%nx
  end if

  allocate (x(cfg%batch, width), t(cfg%batch))
  loss_sum = 0
  since_log = 0
  t0 = MPI_Wtime()
  t_log = t0
  do step = start, cfg%steps - 1
    if (step > start .and. mod(step, cfg%episode) == 0) call burgers_set_initial(sim, cfg%seed, step / cfg%episode)
    call harvest_pairs(step)
    ! linear learning-rate decay: setter calls between steps
    lr_factor = 1d0 - (1d0 - cfg%lr_final) * step / cfg%steps
    call dmuon_set_lr(opt, DMUON_KIND_MUON, cfg%muon_lr * lr_factor)
    call dmuon_set_lr(opt, DMUON_KIND_ADAM, cfg%adam_lr * lr_factor)
    call mlp_pull_params(net)
    loss_sum(1) = loss_sum(1) + mlp_train_batch(net, x, t)
    call mlp_push_grads(net)
    loss_sum(2) = loss_sum(2) + sum(dble(t)**2) / cfg%batch
    since_log = since_log + 1
    call dmuon_step(opt)
    done_steps = step + 1

    if (mod(done_steps, cfg%log_every) == 0 .or. done_steps == cfg%steps) then
      ! the relative loss, as in the C example
      call MPI_Allreduce(loss_sum, global, 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
      now = MPI_Wtime()
      if (rank == 0) then
        write (*, '("step ",i6,"  loss ",es11.4,"  steps/s ",f8.1)') done_steps, global(1) / global(2), since_log / (now - t_log)
        write (csv, '(i0,",",es12.6,",",f0.3)') done_steps, global(1) / global(2), now - t0
        flush (csv)  ! a run killed by the scheduler keeps its curve
        flush (6)
      end if
      loss_sum = 0
      since_log = 0
      t_log = now
    end if
    call dmuon_checkpoint_requested(ctx, requested)
    if (requested .or. (cfg%checkpoint_every > 0 .and. mod(done_steps, max(cfg%checkpoint_every, 1)) == 0)) then
      call dmuon_checkpoint_save(opt, cfg%checkpoint_dir, int(done_steps, c_int64_t))
      if (rank == 0) write (*, '("checkpoint at step ",i0," in ",a)') done_steps, trim(cfg%checkpoint_dir)
      if (requested) then
        if (rank == 0) write (*, '(a)') "checkpoint requested by a signal: exiting; rerun to continue"
        checkpointed_on_request = .true.
        exit
      end if
    end if
  end do

  ! The end of the run is checkpointed too, when the last step was not: a
  ! longer run started later (a larger --steps) continues from here.
  if (.not. checkpointed_on_request .and. start < cfg%steps .and. &
      .not. (cfg%checkpoint_every > 0 .and. mod(cfg%steps, max(cfg%checkpoint_every, 1)) == 0)) then
    call dmuon_checkpoint_save(opt, cfg%checkpoint_dir, int(cfg%steps, c_int64_t))
    if (rank == 0) write (*, '("checkpoint at step ",i0," in ",a)') cfg%steps, trim(cfg%checkpoint_dir)
  end if
  if (rank == 0) close (csv)
  ! Main-program variables are never finalized: destroy explicitly, before MPI_Finalize.
  call dmuon_optimizer_destroy(opt)
  call dmuon_context_destroy(ctx)
  call MPI_Finalize()
  ! 75 (EX_TEMPFAIL): checkpointed on request, run again to continue. The job
  ! scripts requeue on it whoever sent the signal (jobscripts/lib/dmuon_job.sh).
  if (checkpointed_on_request) stop 75, quiet=.true.

contains

  !> After a collective call that returned ierr on this rank: when it failed
  !> on every rank the ranks share the cause (a bad --backend, an unreadable
  !> checkpoint), so rank 0 alone says it; else each failing rank says what it
  !> saw. True when any rank failed, so that all of them leave together.
  logical function failed_anywhere(ierr, what)
    integer, intent(in) :: ierr
    character(len=*), intent(in) :: what
    integer :: mine, count
    mine = merge(1, 0, ierr /= DMUON_SUCCESS)
    call MPI_Allreduce(mine, count, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
    if (mine == 1 .and. (count < nranks .or. rank == 0)) then
      if (count < nranks) then
        write (error_unit, '(a)') "burgers_surrogate_f: this rank: "//what//": "//dmuon_error_string(ierr)//": "// &
          dmuon_context_last_error(ctx)
      else
        write (error_unit, '(a)') "burgers_surrogate_f: "//what//": "//dmuon_error_string(ierr)//": "// &
          dmuon_context_last_error(ctx)
      end if
    end if
    failed_anywhere = count > 0
  end function failed_anywhere

  !> Training pairs of this rank: u_i and (u_{i+j} - u_i)/dx as inputs,
  !> target_scale * du/dt as target (see the C example's harvest_pairs).
  subroutine harvest_pairs(step)
    integer, intent(in) :: step
    double precision, allocatable :: before(:)
    integer, allocatable :: points(:)
    integer(8) :: s
    integer :: k
    call burgers_exchange(sim)
    before = sim%u
    s = rng_seed(cfg%seed, 2 + rank, step)
    allocate (points(cfg%batch))
    do k = 1, cfg%batch
      points(k) = int(rng_uniform(s) * sim%n_local) + 1
      x(k, :) = real((before(points(k) - cfg%stencil:points(k) + cfg%stencil) - before(points(k))) / sim%dx, c_float)
      x(k, cfg%stencil + 1) = real(before(points(k)), c_float)
    end do
    call burgers_advance(sim, cfg%horizon)
    t = real(cfg%target_scale * (sim%u(points) - before(points)) / (cfg%horizon * sim%dt), c_float)
  end subroutine harvest_pairs

end program burgers_surrogate
