! Fortran twin of tests/training/test_master_weights.cpp: with
! options%master_weights = 1, AdamW updates of 1e-4 of the parameter move a
! bf16 parameter (viewed as integer(c_int16_t)) as they move an fp32 one,
! within half a bf16 ulp; without the option they vanish; the masters are
! saved in a checkpoint and a restore into a fresh optimizer goes on the same.
program test_f_master_weights
#include "comm.inc"
  use, intrinsic :: iso_c_binding
  use dmuon
  use ftest
  implicit none
  integer, parameter :: n = 64, nsteps = 300
  COMM_T :: comm
  type(dmuon_context) :: ctx
  type(dmuon_optimizer) :: single, master, plain, resumed
  type(dmuon_options) :: options
  real(c_float), pointer :: ws(:), gs(:)
  integer(c_int16_t), pointer :: hm(:), gm(:), hp(:), gp(:), hr(:), gr(:)
  integer(c_int16_t) :: initial(n), saved(n)
  integer(c_int64_t) :: with_bytes, without_bytes
  integer :: i, step, mpierr, id, moved, ierr, rank
  character(len=256) :: dir

  call MPI_Init(MPI_IERR_ONLY)
  comm = MPI_COMM_WORLD
  mpierr = 0
  call MPI_Comm_rank(comm, rank MPI_IERR)
  call get_command_argument(1, dir)
  if (rank == 0) call execute_command_line("rm -rf '"//trim(dir)//"' && mkdir -p '"//trim(dir)//"'")
  call MPI_Barrier(comm MPI_IERR)
  call dmuon_context_create(comm, "cpu", ctx)
  options%adam_lr = 1d-4
  call make(single, DMUON_DTYPE_FP32, 0)
  call make(master, DMUON_DTYPE_BF16, 1)
  call make(plain, DMUON_DTYPE_BF16, 0)
  call dmuon_param_view(single, 0, ws, gs)
  call dmuon_param_view(master, 0, hm, gm)
  call dmuon_param_view(plain, 0, hp, gp)
  do i = 1, n
    ws(i) = 0.5 + mod(i, 13) * 0.0625
  end do
  hm = [(to_bf16(ws(i)), i = 1, n)]
  hp = hm
  initial = hm

  do step = 1, nsteps
    if (step == nsteps / 2) then
      ! the masters are saved halfway, and restored into `resumed` below
      call dmuon_checkpoint_save(master, trim(dir), int(step, c_int64_t), ierr=ierr)
      call expect_status(ierr, DMUON_SUCCESS, "save with master weights")
      saved = hm
    end if
    do i = 1, n
      gs(i) = (mod(7 * i, 11) - 5) * 0.0625 + 0.03125
    end do
    gm = [(to_bf16(gs(i)), i = 1, n)]
    gp = gm
    call dmuon_step(single)
    call dmuon_step(master)
    call dmuon_step(plain)
  end do

  moved = 0
  do i = 1, n
    call expect(abs(from_bf16(hm(i)) - ws(i)) <= 0.5 * bf16_ulp(ws(i)), "the bf16 parameter is the fp32 one, rounded")
    if (abs(from_bf16(hm(i)) - from_bf16(initial(i))) >= 2 * bf16_ulp(from_bf16(initial(i)))) moved = moved + 1
  end do
  call expect(all(hp == initial), "without master weights updates below half an ulp vanish")
  call expect(moved >= n / 2, "with master weights most parameters moved by two ulps or more")

  call dmuon_state_bytes(master, with_bytes)
  call dmuon_state_bytes(plain, without_bytes)
  call expect(with_bytes == without_bytes * 3 / 2, "state bytes count the fp32 masters")

  ! A fresh optimizer restored from the halfway checkpoint takes the same
  ! remaining steps to the same bf16 values: its masters came from the file.
  call make(resumed, DMUON_DTYPE_BF16, 1)
  call dmuon_checkpoint_restore(resumed, trim(dir), ierr=ierr)
  call expect_status(ierr, DMUON_SUCCESS, "restore with master weights")
  call dmuon_param_view(resumed, 0, hr, gr)
  call expect(all(hr == saved), "restored parameters")
  do step = nsteps / 2, nsteps
    gr = [(to_bf16((mod(7 * i, 11) - 5) * 0.0625 + 0.03125), i = 1, n)]
    call dmuon_step(resumed)
  end do
  call expect(all(hr == hm), "the restored run goes on as the uninterrupted one")

  call dmuon_optimizer_destroy(single)
  call dmuon_optimizer_destroy(master)
  call dmuon_optimizer_destroy(plain)
  call dmuon_optimizer_destroy(resumed)
  call dmuon_context_destroy(ctx)
  call ftest_finish("test_f_master_weights")
  call MPI_Finalize(MPI_IERR_ONLY)

contains

  subroutine make(opt, dtype, with_master)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: dtype, with_master
    options%master_weights = with_master
    call dmuon_optimizer_create(ctx, opt, options)
    call dmuon_register(opt, "bias", DMUON_KIND_ADAM, dtype, [n], id)
    call dmuon_optimizer_finalize(opt)
  end subroutine make

  ! bf16 is the upper half of an fp32; the values used here are exact in bf16.
  pure real(c_float) function from_bf16(h)
    integer(c_int16_t), intent(in) :: h
    from_bf16 = transfer(ishft(iand(int(h, c_int32_t), 65535_c_int32_t), 16), 0.0_c_float)
  end function from_bf16

  pure integer(c_int16_t) function to_bf16(x)
    real(c_float), intent(in) :: x
    integer(c_int32_t) :: upper
    upper = ishft(transfer(x, 0_c_int32_t), -16)
    if (upper > 32767) upper = upper - 65536
    to_bf16 = int(upper, c_int16_t)
  end function to_bf16

  ! One bf16 ulp at x: eight significand bits against fp32's twenty-four.
  pure real(c_float) function bf16_ulp(x)
    real(c_float), intent(in) :: x
    bf16_ulp = spacing(x) * 65536.0
  end function bf16_ulp

end program test_f_master_weights
