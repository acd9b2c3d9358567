! Fortran twin of tests/mpi/test_adam.cpp and the Muon step test: a model of
! Adam and Muon parameters, a different gradient on every rank, checked after
! every step against the float64 reference of fref.f90 run on the averaged
! gradient, and bitwise equal on every rank. The Muon matrices are
! non-square both ways, so the shape scale checks the shape convention:
! Fortran (3, 8) is the C matrix [8, 3] (scale sqrt(8/3)), (8, 4) is [4, 8].
program test_f_step
#include "comm.inc"
  use, intrinsic :: iso_c_binding
  use dmuon
  use ftest
  use fref
  implicit none
  integer, parameter :: nsteps = 4
  COMM_T :: comm
  type(dmuon_context) :: ctx
  type(dmuon_optimizer) :: opt
  type(dmuon_options) :: options
  type(dmuon_clip_stats) :: stats
  real(c_float), pointer :: w_in(:, :), g_in(:, :), w_t(:, :), g_t(:, :), w_w(:, :), g_w(:, :), b(:), gb(:)
  double precision :: r_in(5, 8), r_t(3, 8), r_w(8, 4), r_b(8), m_t(3, 8), m_w(8, 4)
  double precision :: a_in(5, 8), a_t(3, 8), a_w(8, 4), a_b(8)
  type(adamw_state) :: s_in, s_b
  integer :: rank, nranks, mpierr, id_in, id_t, id_w, id_b, step, r
  integer(c_int64_t) :: count
  logical :: b_has_grad

  call MPI_Init(MPI_IERR_ONLY)
  comm = MPI_COMM_WORLD
  call MPI_Comm_rank(comm, rank MPI_IERR)
  call MPI_Comm_size(comm, nranks MPI_IERR)
  mpierr = 0

  call dmuon_context_create(comm, "cpu", ctx)
  options%adam_lr = 0.01d0
  options%adam_weight_decay = 0.1d0
  options%muon_lr = 0.05d0
  options%muon_weight_decay = 0.2d0
  call dmuon_optimizer_create(ctx, opt, options)
  call dmuon_register(opt, "w_in", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [5, 8], id_in)
  call dmuon_register(opt, "w_tall", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [3, 8], id_t)
  call dmuon_register(opt, "w_wide", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [8, 4], id_w)
  call dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [8], id_b, wd_mul=0d0)
  call dmuon_optimizer_finalize(opt)
  call dmuon_param_view(opt, id_in, w_in, g_in)
  call dmuon_param_view(opt, id_t, w_t, g_t)
  call dmuon_param_view(opt, id_w, w_w, g_w)
  call dmuon_param_view(opt, id_b, b, gb)

  ! The same fp32 initial values on every rank, mirrored in the reference.
  call fill(w_in, 1); r_in = w_in
  call fill(w_t, 2); r_t = w_t
  call fill(w_w, 3); r_w = w_w
  b = 0.1; r_b = b
  m_t = 0; m_w = 0

  do step = 1, nsteps
    b_has_grad = step /= 3  ! b has no gradient in step 3: skipped whole
    g_in = real(grad(rank, step, 1, shape(g_in)), c_float)
    g_t = real(grad(rank, step, 2, shape(g_t)), c_float)
    g_w = real(grad(rank, step, 3, shape(g_w)), c_float)
    gb = real(reshape(grad(rank, step, 4, [8, 1]), [8]), c_float)
    if (.not. b_has_grad) call dmuon_mark_no_grad(opt, id_b)
    call dmuon_step(opt)

    ! Reference: the average of every rank's fp32-rounded gradient.
    a_in = 0; a_t = 0; a_w = 0; a_b = 0
    do r = 0, nranks - 1
      a_in = a_in + real(grad(r, step, 1, [5, 8]), c_float) / nranks
      a_t = a_t + real(grad(r, step, 2, [3, 8]), c_float) / nranks
      a_w = a_w + real(grad(r, step, 3, [8, 4]), c_float) / nranks
      a_b = a_b + real(reshape(grad(r, step, 4, [8, 1]), [8]), c_float) / nranks
    end do
    call adamw_ref_2d(r_in, a_in, s_in, options%adam_weight_decay)
    call muon_ref(r_t, a_t, m_t, options%muon_lr, options%muon_momentum, options%muon_weight_decay)
    call muon_ref(r_w, a_w, m_w, options%muon_lr, options%muon_momentum, options%muon_weight_decay)
    if (b_has_grad) call adamw_ref(r_b, a_b, s_b, options%adam_lr, options%adam_beta1, options%adam_beta2, &
                                   options%adam_eps, 0d0)

    call expect(maxval(abs(w_in - r_in) / (abs(r_in) + 1d-3)) < 2d-5, "w_in (AdamW) matches the reference")
    call expect(maxval(abs(w_t - r_t)) < 2d-5, "w_tall (Muon, C [8,3]) matches the reference")
    call expect(maxval(abs(w_w - r_w)) < 2d-5, "w_wide (Muon, C [4,8]) matches the reference")
    call expect(maxval(abs(b - r_b) / (abs(r_b) + 1d-3)) < 2d-5, "b (AdamW, no decay) matches the reference")
    call expect_same_on_all_ranks(w_in)
    call expect_same_on_all_ranks(w_t)
    call expect_same_on_all_ranks(w_w)
  end do

  call dmuon_get_step_count(opt, count)
  call expect(count == nsteps, "step count")
  call dmuon_get_clip_stats(opt, stats)
  call expect(stats%clipped == 0 .and. stats%clip_coef == 1d0, "clipping is off by default")
  call dmuon_optimizer_destroy(opt)
  call dmuon_context_destroy(ctx)
  call ftest_finish("test_f_step")
  call MPI_Finalize(MPI_IERR_ONLY)

contains

  subroutine fill(w, seed)
    real(c_float), intent(out) :: w(:, :)
    integer, intent(in) :: seed
    integer :: i, j
    do j = 1, size(w, 2)
      do i = 1, size(w, 1)
        w(i, j) = real(0.5d0 * cos(0.9d0 * i + 1.7d0 * j + seed), c_float)
      end do
    end do
  end subroutine fill

  !> A gradient that differs by rank, step and parameter.
  function grad(r, step, param, extents) result(g)
    integer, intent(in) :: r, step, param, extents(2)
    double precision :: g(extents(1), extents(2))
    integer :: i, j
    do j = 1, extents(2)
      do i = 1, extents(1)
        g(i, j) = sin(1.3d0 * i + 0.61d0 * j + 0.7d0 * param + 0.37d0 * step + 1.1d0 * r)
      end do
    end do
  end function grad

  subroutine adamw_ref_2d(p, g, s, wd)
    double precision, intent(inout) :: p(:, :)
    double precision, intent(in) :: g(:, :), wd
    type(adamw_state), intent(inout) :: s
    double precision :: flat(size(p))
    flat = reshape(p, [size(p)])
    call adamw_ref(flat, reshape(g, [size(g)]), s, options%adam_lr, options%adam_beta1, options%adam_beta2, &
                   options%adam_eps, wd)
    p = reshape(flat, shape(p))
  end subroutine adamw_ref_2d

  subroutine expect_same_on_all_ranks(w)
    real(c_float), intent(in) :: w(:, :)
    real(c_float) :: root(size(w, 1), size(w, 2))
    root = w
    call MPI_Bcast(root, size(root), MPI_REAL, 0, comm MPI_IERR)
    call expect(all(root == w), "parameters bitwise equal to rank 0's")
  end subroutine expect_same_on_all_ranks

end program test_f_step
