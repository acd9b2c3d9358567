! Fortran twin of tests/mpi/test_registration.cpp (plus what only Fortran
! has): identical lists finalize; a different shape, name, dtype, kind or
! count on the last rank is refused on every rank with
! DMUON_ERR_REGISTRATION_MISMATCH; shapes are reversed for C and the views
! have the registered Fortran shape; wrong pointer type or rank is refused.
program test_f_registration
#include "comm.inc"
  use, intrinsic :: iso_c_binding
  use dmuon
  use ftest
  implicit none
  COMM_T :: comm
  type(dmuon_context) :: ctx
  integer :: rank, nranks, mpierr, variant

  call MPI_Init(MPI_IERR_ONLY)
  comm = MPI_COMM_WORLD
  call MPI_Comm_rank(comm, rank MPI_IERR)
  call MPI_Comm_size(comm, nranks MPI_IERR)
  mpierr = 0
  call dmuon_context_create(comm, "cpu", ctx)

  call identical_lists_finalize()
  do variant = 1, 5
    call differing_last_rank(variant)
  end do
  call views_and_shapes()
  call errors_are_returned()

  call dmuon_context_destroy(ctx)
  call dmuon_context_destroy(ctx)  ! a second destroy is harmless
  call ftest_finish("test_f_registration")
  call MPI_Finalize(MPI_IERR_ONLY)

contains

  subroutine register_model(opt, variant)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: variant  ! 0: the common model; 1..5: changed on the last rank
    logical :: odd
    integer :: ierr
    odd = rank == nranks - 1 .and. variant > 0
    call dmuon_register(opt, "w1", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [8, 16], ierr=ierr)
    call expect_status(ierr, DMUON_SUCCESS, "register w1")
    if (odd .and. variant == 1) then
      call dmuon_register(opt, "b1", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [17], ierr=ierr)
    else if (odd .and. variant == 2) then
      call dmuon_register(opt, "b1_renamed", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [16], ierr=ierr)
    else if (odd .and. variant == 3) then
      call dmuon_register(opt, "b1", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, [16], ierr=ierr)
    else if (odd .and. variant == 4) then
      call dmuon_register(opt, "b1", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [16, 1], ierr=ierr)
    else
      call dmuon_register(opt, "b1", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [16], ierr=ierr)
    end if
    call expect_status(ierr, DMUON_SUCCESS, "register b1")
    if (.not. (odd .and. variant == 5)) then
      call dmuon_register(opt, "w2", DMUON_KIND_MUON, DMUON_DTYPE_BF16, [16, 4], ierr=ierr)
      call expect_status(ierr, DMUON_SUCCESS, "register w2")
    end if
  end subroutine register_model

  subroutine identical_lists_finalize()
    type(dmuon_optimizer) :: opt
    integer :: ierr, count
    call dmuon_optimizer_create(ctx, opt)
    call register_model(opt, 0)
    call dmuon_optimizer_finalize(opt, ierr)
    call expect_status(ierr, DMUON_SUCCESS, "finalize identical lists")
    call dmuon_num_params(opt, count)
    call expect(count == 3, "three parameters")
    call dmuon_optimizer_finalize(opt, ierr)
    call expect_status(ierr, DMUON_ERR_ALREADY_FINALIZED, "second finalize")
    call dmuon_optimizer_destroy(opt)
  end subroutine identical_lists_finalize

  subroutine differing_last_rank(variant)
    integer, intent(in) :: variant
    type(dmuon_optimizer) :: opt
    integer :: ierr
    character(len=80) :: what
    write (what, '("registration differing on the last rank, variant ",i0)') variant
    call dmuon_optimizer_create(ctx, opt)
    call register_model(opt, variant)
    call dmuon_optimizer_finalize(opt, ierr)
    if (nranks > 1) then
      call expect_status(ierr, DMUON_ERR_REGISTRATION_MISMATCH, trim(what))
      call expect(len(dmuon_context_last_error(ctx)) > 0, "a message for the mismatch")
    end if
    call dmuon_step(opt, ierr)  ! still unfinalized after a mismatch
    if (nranks > 1) call expect_status(ierr, DMUON_ERR_NOT_FINALIZED, "step after a refused finalize")
    ! `opt` goes out of scope here: its final procedure destroys it.
  end subroutine differing_last_rank

  subroutine views_and_shapes()
    type(dmuon_optimizer) :: opt
    real(c_float), pointer :: w(:, :), gw(:, :), flat(:), gflat(:), b(:), gb(:), w3(:, :, :), gw3(:, :, :)
    integer(c_int16_t), pointer :: h(:, :), gh(:, :)
    integer(c_int64_t) :: numel
    integer :: id_w, id_b, id_h, id, ierr
    call dmuon_optimizer_create(ctx, opt)
    call dmuon_register(opt, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [3, 5], id_w)
    call dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [5], id_b)
    call dmuon_register(opt, "h", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, [2, 7], id_h)
    call expect(id_w == 0 .and. id_b == 1 .and. id_h == 2, "ids are the C ids 0, 1, 2")
    call dmuon_param_view(opt, id_w, w, gw, ierr)
    call expect_status(ierr, DMUON_ERR_NOT_FINALIZED, "view before finalize")
    call expect(.not. associated(w), "no view before finalize")
    call dmuon_optimizer_finalize(opt)
    call dmuon_param_id(opt, "b", id)
    call expect(id == id_b, "param_id finds b")
    call dmuon_param_numel(opt, id_w, numel)
    call expect(numel == 15, "numel of w")
    call dmuon_param_view(opt, id_w, w, gw)
    call expect(all(shape(w) == [3, 5]) .and. all(shape(gw) == [3, 5]), "w is viewed as (3, 5)")
    call dmuon_param_view(opt, id_w, flat, gflat)
    call expect(size(flat) == 15, "flat view of w")
    ! Column-major Fortran (i, j) is C row-major [j][i]: flat index i + 3 (j - 1).
    w = 0
    w(2, 4) = 7
    call expect(flat(2 + 3 * 3) == 7, "w(2,4) is flat element 11: the C shape is [5, 3]")
    gw = 1
    call expect(all(gflat == 1), "gradient views share storage")
    call dmuon_param_view(opt, id_b, b, gb)
    call expect(size(b) == 5, "b has 5 elements")
    call dmuon_param_view(opt, id_h, h, gh)
    call expect(all(shape(h) == [2, 7]), "bf16 parameter viewed as integer(c_int16_t) (2, 7)")
    call dmuon_param_view(opt, id_h, w, gw, ierr)
    call expect_status(ierr, DMUON_ERR_INVALID_DTYPE, "real view of a bf16 parameter")
    call expect(index(dmuon_context_last_error(ctx), "dtype") > 0, "the message names the dtype")
    call dmuon_param_view(opt, id_w, w3, gw3, ierr)
    call expect_status(ierr, DMUON_ERR_INVALID_SHAPE, "rank-3 view of a matrix")
    call dmuon_param_view(opt, 99, w, gw, ierr)
    call expect_status(ierr, DMUON_ERR_INVALID_PARAM_ID, "view of id 99")
    call dmuon_optimizer_destroy(opt)
  end subroutine views_and_shapes

  subroutine errors_are_returned()
    type(dmuon_optimizer) :: opt
    type(dmuon_context) :: other
    type(dmuon_options) :: options, got
    integer :: ierr, id
    character(len=16) :: backend
    ! Fields and defaults of the bind(C) mirror travel through the C library unchanged.
    options%adam_lr = 0.125d0
    options%muon_ns_steps = 7
    options%cuda_step_graph = 0
    options%collective_timeout_ms = 1234
    call dmuon_optimizer_create(ctx, opt, options)
    call dmuon_get_options(opt, got)
    call expect(got%adam_lr == 0.125d0 .and. got%muon_ns_steps == 7 .and. got%collective_timeout_ms == 1234, &
                "options set in Fortran are read back")
    call expect(got%adam_beta2 == 0.999d0 .and. got%muon_momentum == 0.95d0 .and. got%muon_nesterov == 1 .and. &
                got%cuda_graphs == 1 .and. got%muon_ns_eps == 1d-7, "the Fortran defaults are the C defaults")
    call expect(got%struct_size == c_sizeof(options), "dmuon_options has the C struct's size")
    call dmuon_register(opt, "m", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [2, 3, 4], ierr=ierr)
    call expect_status(ierr, DMUON_ERR_MUON_NOT_2D, "3-D Muon parameter")
    call dmuon_register(opt, "m", DMUON_KIND_MUON, DMUON_DTYPE_FP32, [4, 4], id)
    call dmuon_register(opt, "m", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [4], ierr=ierr)
    call expect_status(ierr, DMUON_ERR_DUPLICATE_NAME, "duplicate name")
    call expect(index(dmuon_context_last_error(ctx), "m") > 0, "message of the C library")
    call dmuon_set_betas(opt, 1.5d0, 0.9d0, ierr)
    call expect_status(ierr, DMUON_ERR_INVALID_VALUE, "beta1 = 1.5")
    call dmuon_context_create(comm, "no-such-backend", other, ierr)
    call expect_status(ierr, DMUON_ERR_UNKNOWN_BACKEND, "unknown backend string")
    call dmuon_context_backend(ctx, backend)
    call expect(backend == "cpu", "backend name")
    call dmuon_check_version(ierr)
    call expect_status(ierr, DMUON_SUCCESS, "module and library versions agree")
    call expect(dmuon_error_string(DMUON_ERR_MUON_NOT_2D) == "a Muon parameter must be a 2-D matrix", &
                "status text from C")
    call dmuon_optimizer_destroy(opt)
    call dmuon_step(opt, ierr)
    call expect_status(ierr, DMUON_ERR_NULL_HANDLE, "step on a destroyed optimizer")
  end subroutine errors_are_returned

end program test_f_registration
