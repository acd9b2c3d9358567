! Fortran twin of die_in_step.cpp: a rank dies inside a step, and the
! surviving Fortran callers get DMUON_ERR_TIMEOUT in ierr within the timeout,
! then again at once (from the next step and from the collective checkpoint
! request alike), and can still destroy everything.
!
!   die_in_step_f <point> <verdict_dir> <victim_rank> <timeout_ms>
!
! The fault is injected by die_inject.cpp (MPI profiling interface), armed
! through dmuon_test_arm_death. The verdict goes to <verdict_dir>/rank<r>.txt,
! judged by check_verdicts.cmake (mpirun's status says nothing here).
program die_in_step_f
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64
  use mpi_f08
  use dmuon
  implicit none
  interface
    subroutine arm_death(point) bind(C, name="dmuon_test_arm_death")
      import :: c_char
      character(kind=c_char), intent(in) :: point(*)
    end subroutine arm_death
    ! Leaves without MPI_Finalize, which is collective and undefined with a dead rank.
    subroutine c_exit(status) bind(C, name="_exit")
      import :: c_int
      integer(c_int), value :: status
    end subroutine c_exit
  end interface

  type(dmuon_context) :: ctx
  type(dmuon_optimizer) :: opt
  type(dmuon_options) :: o
  character(len=256) :: point, dir, arg
  character(len=:), allocatable :: verdict_path, failures
  integer :: rank, nranks, victim, timeout_ms, ierr, m, u
  logical :: requested
  integer(int64) :: t0, t1, rate
  double precision :: ms

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  call get_command_argument(1, point)
  call get_command_argument(2, dir)
  call get_command_argument(3, arg)
  read (arg, *) victim
  call get_command_argument(4, arg)
  read (arg, *) timeout_ms
  verdict_path = trim(dir)//"/rank"//itoa(rank)//".txt"
  failures = ""
  ! A verdict must come from this run.
  open (newunit=u, file=verdict_path, status="replace")
  close (u, status="delete")
  call MPI_Barrier(MPI_COMM_WORLD)

  o%collective_timeout_ms = timeout_ms
  o%max_grad_norm = 1.0d0
  call dmuon_context_create(MPI_COMM_WORLD, "cpu", ctx, ierr)
  call expect(ierr == DMUON_SUCCESS, "context_create")
  call dmuon_optimizer_create(ctx, opt, o, ierr)
  call expect(ierr == DMUON_SUCCESS, "optimizer_create")
  do m = 0, nranks - 1  ! one Muon matrix per rank, and an Adam vector
    call dmuon_register(opt, "w"//itoa(m), DMUON_KIND_MUON, DMUON_DTYPE_FP32, [8, 16], ierr=ierr)
    call expect(ierr == DMUON_SUCCESS, "register")
  end do
  call dmuon_register(opt, "bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [37], ierr=ierr)
  call dmuon_optimizer_finalize(opt, ierr)
  call expect(ierr == DMUON_SUCCESS, "finalize")
  if (len(failures) > 0) call finish()

  ! Zero gradients: the step's collectives run all the same.
  call dmuon_step(opt, ierr)
  call expect(ierr == DMUON_SUCCESS, "first step returned "//itoa(ierr))

  if (rank == victim) call arm_death(trim(point)//c_null_char)
  call system_clock(t0, rate)
  call dmuon_step(opt, ierr)
  call system_clock(t1)
  if (rank == victim) then
    failures = "the victim did not die at "//trim(point)
    call finish()
  end if
  ms = 1000d0*dble(t1 - t0)/dble(rate)
  print '(a,i0,a,i0,a,f8.0,a)', "rank ", rank, ": dmuon_step ierr = ", ierr, " after ", ms, " ms"
  call expect(ierr == DMUON_ERR_TIMEOUT, "failed step gave ierr "//itoa(ierr)//", not DMUON_ERR_TIMEOUT")
  call expect(ms >= 0.95d0*timeout_ms, "returned before the timeout")
  call expect(ms <= timeout_ms + 5000d0, "returned long after the timeout")
  call dmuon_step(opt, ierr)
  call expect(ierr == DMUON_ERR_TIMEOUT, "step after the failure gave ierr "//itoa(ierr))
  ! A collective call outside the step fails at once too, instead of waiting for the dead rank.
  call system_clock(t0)
  call dmuon_checkpoint_requested(ctx, requested, ierr)
  call system_clock(t1)
  call expect(ierr == DMUON_ERR_TIMEOUT, "checkpoint_requested after the failure gave ierr "//itoa(ierr))
  call expect(1000d0*dble(t1 - t0)/dble(rate) < 0.5d0*timeout_ms, "checkpoint_requested after the failure waited")
  call dmuon_optimizer_destroy(opt, ierr)
  call expect(ierr == DMUON_SUCCESS, "optimizer_destroy")
  call dmuon_context_destroy(ctx, ierr)
  call expect(ierr == DMUON_SUCCESS, "context_destroy")
  call finish()

contains

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) failures = failures//what//"; "
  end subroutine expect

  function itoa(i) result(s)
    integer, intent(in) :: i
    character(len=:), allocatable :: s
    character(len=16) :: buf
    write (buf, '(i0)') i
    s = trim(buf)
  end function itoa

  subroutine finish()
    open (newunit=u, file=verdict_path, status="replace", action="write")
    if (len(failures) == 0) then
      write (u, '(a)') "OK"
    else
      write (u, '(a)') "FAIL "//failures
    end if
    close (u)
    print '(a,i0,a,a)', "rank ", rank, " verdict: ", merge("OK  ", "FAIL", len(failures) == 0)
    flush (6)
    call c_exit(merge(0_c_int, 1_c_int, len(failures) == 0))
  end subroutine finish

end program die_in_step_f
