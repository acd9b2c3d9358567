! Fortran side of the contracts of tests/contracts.cmake: the options type
! equals the C defaults field by field; handles destroyed in any order (and
! by finalizers, in the compiler's order) with steps in between; views that
! survive a restore onto the same plan (views_moved); replicated parameters
! checked and broadcast. Argument: a checkpoint directory.
program test_f_contracts
  use mpi
  use, intrinsic :: iso_c_binding
  use dmuon
  use ftest
  implicit none
  interface
    integer(c_int) function options_differ(o) bind(C, name="dmuon_test_options_differ")
      import :: c_int, dmuon_options
      type(dmuon_options), intent(in) :: o
    end function
  end interface
  integer :: rank, nranks, mpierr
  character(len=512) :: dir

  call MPI_Init(mpierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, mpierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, mpierr)
  call get_command_argument(1, dir)
  write (dir, '(a,"_np",i0)') trim(dir), nranks  ! the runs at 1 and 2 ranks may overlap

  call options_match_c()
  call context_destroyed_first()
  call destroyed_by_finalizers()
  call views_survive_restore()
  call replicas()

  call ftest_finish("test_f_contracts")
  call MPI_Finalize(mpierr)

contains

  subroutine options_match_c()
    type(dmuon_options) :: o
    o%struct_size = c_sizeof(o)
    call expect_status(int(options_differ(o)), -1, "Fortran dmuon_options defaults equal DMUON_OPTIONS_INIT")
  end subroutine options_match_c

  !> A model of one Adam vector of 5, finalized.
  subroutine make(ctx, opt)
    type(dmuon_context), intent(out) :: ctx
    type(dmuon_optimizer), intent(out) :: opt
    call dmuon_context_create(MPI_COMM_WORLD, "cpu", ctx)
    call dmuon_optimizer_create(ctx, opt)
    call dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [5])
    call dmuon_optimizer_finalize(opt)
  end subroutine make

  !> One step with a gradient: the parameter must move.
  subroutine step_moves(opt, what)
    type(dmuon_optimizer), intent(inout) :: opt
    character(len=*), intent(in) :: what
    real(c_float), pointer :: p(:), g(:)
    real(c_float) :: before
    integer :: ierr
    call dmuon_param_view(opt, 0, p, g)
    g = 0.5
    before = p(1)
    call dmuon_step(opt, ierr)
    call expect_status(ierr, DMUON_SUCCESS, what//": step")
    call expect(p(1) /= before, what//": the step moved the parameter")
  end subroutine step_moves

  subroutine context_destroyed_first()
    type(dmuon_context) :: ctx
    type(dmuon_optimizer) :: opt
    integer :: ierr
    call make(ctx, opt)
    call dmuon_context_destroy(ctx, ierr)
    call expect_status(ierr, DMUON_SUCCESS, "context destroyed before its optimizer")
    call step_moves(opt, "after the context's destroy")
    ! `opt` goes with the finalizer at return, after its context's handle.
  end subroutine context_destroyed_first

  subroutine destroyed_by_finalizers()
    integer :: i
    do i = 1, 2
      block
        type(dmuon_optimizer) :: opt
        type(dmuon_context) :: ctx
        call make(ctx, opt)
        call step_moves(opt, "before the finalizers")
      end block
    end do
    call expect(.true., "finalizers of a block ran in the compiler's order without a crash")
  end subroutine destroyed_by_finalizers

  subroutine views_survive_restore()
    type(dmuon_context) :: ctx
    type(dmuon_optimizer) :: opt
    real(c_float), pointer :: p(:), g(:), p2(:), g2(:)
    real(c_float) :: saved(5)
    logical :: moved
    integer :: ierr
    integer(c_int64_t) :: epoch
    call make(ctx, opt)
    call dmuon_param_view(opt, 0, p, g)
    p = [1.0, 2.0, 3.0, 4.0, 5.0]
    call step_moves(opt, "before the save")
    saved = p
    call remove_earlier_run(trim(dir)//"/ckpt_1.h5")  ! a save never overwrites a checkpoint
    call dmuon_checkpoint_save(opt, trim(dir), 1_c_int64_t, ierr=ierr)
    call expect_status(ierr, DMUON_SUCCESS, "save")
    call step_moves(opt, "after the save")
    call dmuon_checkpoint_restore(opt, trim(dir), ierr=ierr, views_moved=moved)
    call expect_status(ierr, DMUON_SUCCESS, "restore")
    call expect(.not. moved, "a restore onto the same plan keeps the views")
    call dmuon_views_epoch(opt, epoch)
    call expect(epoch == 0, "views epoch 0 after a restore onto the same plan")
    call dmuon_param_view(opt, 0, p2, g2)
    call expect(c_associated(c_loc(p), c_loc(p2)), "the same address after the restore")
    call expect(all(p == saved), "the old view reads the restored values")
    call dmuon_optimizer_destroy(opt)
    call dmuon_context_destroy(ctx)
  end subroutine views_survive_restore

  !> Rank 0 deletes `file` if an earlier run left it; everyone waits.
  subroutine remove_earlier_run(file)
    character(len=*), intent(in) :: file
    integer :: u, ios, ierr
    if (rank == 0) then
      open (newunit=u, file=file, status="old", iostat=ios)
      if (ios == 0) close (u, status="delete")
    end if
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
  end subroutine remove_earlier_run

  subroutine replicas()
    type(dmuon_context) :: ctx
    type(dmuon_optimizer) :: opt
    real(c_float), pointer :: p(:), g(:)
    integer :: ierr
    call make(ctx, opt)
    call dmuon_param_view(opt, 0, p, g)
    p = real(rank, c_float)
    call dmuon_check_replicas(opt, ierr)
    if (nranks > 1) then
      call expect_status(ierr, DMUON_ERR_REPLICAS_DIFFER, "per-rank values are found")
    else
      call expect_status(ierr, DMUON_SUCCESS, "one rank agrees with itself")
    end if
    call dmuon_broadcast_params(opt, nranks - 1, ierr)
    call expect_status(ierr, DMUON_SUCCESS, "broadcast")
    call expect(all(p == real(nranks - 1, c_float)), "every rank holds the root's values")
    call dmuon_check_replicas(opt, ierr)
    call expect_status(ierr, DMUON_SUCCESS, "replicas agree after the broadcast")
    call dmuon_optimizer_destroy(opt)
    call dmuon_context_destroy(ctx)
  end subroutine replicas

end program test_f_contracts
