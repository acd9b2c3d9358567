! Fortran twin of the checkpoint tests: save, go on, restore the directory's
! latest (parameters, step count and attribute come back; the next steps
! repeat bitwise, so the optimizer state came back too), a missing directory
! answers DMUON_ERR_NOT_FOUND, another model DMUON_ERR_CHECKPOINT_MISMATCH.
! Argument: a scratch directory (emptied first).
program test_f_checkpoint
#include "comm.inc"
  use, intrinsic :: iso_c_binding
  use dmuon
  use ftest
  implicit none
  COMM_T :: comm
  type(dmuon_context) :: ctx
  type(dmuon_optimizer) :: opt, other
  type(dmuon_checkpoint_options) :: ckpt_options
  real(c_float), pointer :: w(:, :), gw(:, :), b(:), gb(:)
  real(c_float) :: w_saved(4, 6), b_saved(6), w_after(4, 6), b_after(6)
  character(len=1024) :: dir
  character(len=32) :: who
  integer(c_int64_t) :: user_step, count
  integer :: rank, mpierr, id_w, id_b, ierr, step

  call MPI_Init(MPI_IERR_ONLY)
  comm = MPI_COMM_WORLD
  call MPI_Comm_rank(comm, rank MPI_IERR)
  mpierr = 0
  call get_command_argument(1, dir)
  if (rank == 0) call execute_command_line("rm -rf '"//trim(dir)//"' && mkdir -p '"//trim(dir)//"'")
  call MPI_Barrier(comm MPI_IERR)

  call dmuon_context_create(comm, "cpu", ctx)
  call dmuon_optimizer_create(ctx, opt)
  call dmuon_register(opt, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [4, 6], id_w)
  call dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [6], id_b)
  call dmuon_optimizer_finalize(opt)
  call dmuon_param_view(opt, id_w, w, gw)
  call dmuon_param_view(opt, id_b, b, gb)
  w = 0.25
  b = -0.5

  call dmuon_checkpoint_restore(opt, trim(dir)//"/none", user_step, ierr)
  call expect_status(ierr, DMUON_ERR_NOT_FOUND, "restore from a missing directory")

  do step = 1, 3
    call take_step(step)
  end do
  call dmuon_checkpoint_set_attribute(opt, "who", "fortran")
  ckpt_options%keep_last = 2
  call dmuon_checkpoint_save(opt, dir, 3_c_int64_t, ckpt_options, ierr)
  call expect_status(ierr, DMUON_SUCCESS, "save at step 3")
  w_saved = w
  b_saved = b
  do step = 4, 5
    call take_step(step)
  end do
  w_after = w
  b_after = b
  call expect(any(w /= w_saved), "the steps after the save changed w")

  call dmuon_checkpoint_restore(opt, dir, user_step, ierr)
  call expect_status(ierr, DMUON_SUCCESS, "restore the directory's latest")
  ! A restore may re-plan the storage: the views are taken again.
  call dmuon_param_view(opt, id_w, w, gw)
  call dmuon_param_view(opt, id_b, b, gb)
  call expect(user_step == 3, "the user step comes back")
  call expect(all(w == w_saved) .and. all(b == b_saved), "parameters come back bitwise")
  call dmuon_get_step_count(opt, count)
  call expect(count == 3, "the step count comes back")
  call dmuon_checkpoint_get_attribute(opt, "who", who, ierr)
  call expect_status(ierr, DMUON_SUCCESS, "get attribute")
  call expect(who == "fortran", "the attribute comes back")
  do step = 4, 5
    call take_step(step)
  end do
  call expect(all(w == w_after) .and. all(b == b_after), "momentum and moments came back: same steps, same result")

  ! Another model (a different shape) is refused and left unchanged.
  call dmuon_optimizer_create(ctx, other)
  call dmuon_register(other, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [6, 4], id_w)
  call dmuon_register(other, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [6], id_b)
  call dmuon_optimizer_finalize(other)
  call dmuon_checkpoint_restore(other, dir, user_step, ierr)
  call expect_status(ierr, DMUON_ERR_CHECKPOINT_MISMATCH, "restore into another model")
  call dmuon_get_step_count(other, count)
  call expect(count == 0, "a refused restore changes nothing")

  call dmuon_optimizer_destroy(other)
  call dmuon_optimizer_destroy(opt)
  call dmuon_context_destroy(ctx)
  call ftest_finish("test_f_checkpoint")
  call MPI_Finalize(MPI_IERR_ONLY)

contains

  subroutine take_step(step)
    integer, intent(in) :: step
    integer :: i, j
    do j = 1, 6
      do i = 1, 4
        gw(i, j) = real(sin(0.3d0 * i * j + step + rank), c_float)
      end do
      gb(j) = real(cos(0.5d0 * j + step - rank), c_float)
    end do
    call dmuon_step(opt)
  end subroutine take_step

end program test_f_checkpoint
