! Consumer of an installed dmuon from Fortran (use mpi_f08): one Muon matrix,
! one Adam vector, one step; stops with an error unless both changed.
program consumer_fortran
  use, intrinsic :: iso_c_binding, only: c_float, c_int64_t
  use mpi_f08
  use dmuon
  implicit none
  type(dmuon_context) :: ctx
  type(dmuon_optimizer) :: opt
  real(c_float), pointer :: w(:, :), gw(:, :), b(:), gb(:)
  integer(c_int64_t) :: steps
  integer :: id_w, id_b, rank, nranks, i
  logical :: ok

  call MPI_Init()
  call dmuon_check_version()
  call dmuon_context_create(MPI_COMM_WORLD, "cpu", ctx)
  call dmuon_context_rank(ctx, rank, nranks)
  call dmuon_optimizer_create(ctx, opt)
  call dmuon_register(opt, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [4, 8], id_w)
  call dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [8], id_b, wd_mul=0d0)
  call dmuon_optimizer_finalize(opt)
  call dmuon_param_view(opt, id_w, w, gw)
  call dmuon_param_view(opt, id_b, b, gb)
  gw = reshape([(real(mod(i, 5) - 2, c_float) + 0.1 * rank, i = 0, 31)], [4, 8])
  gb = 1
  call dmuon_step(opt)
  call dmuon_get_step_count(opt, steps)
  ok = steps == 1 .and. any(w /= 0) .and. b(1) < 0
  if (rank == 0) write (*, '("consumer_fortran on ",i0," ranks: ",a)') nranks, merge("OK    ", "FAILED", ok)
  call dmuon_optimizer_destroy(opt)
  call dmuon_context_destroy(ctx)
  call MPI_Finalize()
  if (.not. ok) error stop 1
end program consumer_fortran
