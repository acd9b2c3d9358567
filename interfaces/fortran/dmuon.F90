! dmuon: the Fortran interface of dmuon, over the raw bindings of dmuon_c.
!
! Every C call has a subroutine of the same name. The status is an optional
! trailing `ierr`: present, it receives the status and nothing else happens;
! absent, a failing call writes the library's message to error_unit and stops
! the program (the C library itself never prints or stops).
!
! Shapes are given in Fortran order and reversed for the C library, so a
! parameter registered as shape [n_in, n_out] is viewed as a Fortran array
! w(n_in, n_out) and is the C/PyTorch matrix [n_out, n_in]: Muon's rows are
! n_out. See docs/fortran.md.
module dmuon
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi_f08, only: MPI_Comm
  use dmuon_c
  implicit none
  private

  ! Everything of dmuon_c that a user needs: constants and the bind(C) types.
  public :: dmuon_options, dmuon_clip_stats, dmuon_checkpoint_options
  public :: DMUON_KIND_MUON, DMUON_KIND_ADAM, DMUON_DTYPE_FP32, DMUON_DTYPE_BF16, DMUON_NS_QUINTIC, &
            DMUON_NS_POLAR_EXPRESS, DMUON_SCALE_ORIGINAL, DMUON_SCALE_MATCH_ADAMW_RMS
#include "dmuon_constants_public.inc"

  !> A context: an MPI communicator plus a backend. Destroyed by
  !> dmuon_context_destroy, or when it goes out of scope (final).
  type, public :: dmuon_context
    type(c_ptr) :: ptr = c_null_ptr
  contains
    final :: context_final
  end type dmuon_context

  !> An optimizer. Besides the C handle it remembers each registered
  !> parameter's dtype and Fortran shape, which the views need.
  type, public :: dmuon_optimizer
    type(c_ptr) :: ptr = c_null_ptr
    type(c_ptr) :: ctx = c_null_ptr  ! its context, where the C library keeps the messages
    integer, allocatable :: dtypes(:), ndims(:)
    integer(c_int64_t), allocatable :: shapes(:, :)  ! (8, nparams), Fortran order
  contains
    final :: optimizer_final
  end type dmuon_optimizer

  public :: dmuon_get_version, dmuon_check_version, dmuon_error_string, dmuon_context_create, &
            dmuon_context_destroy, dmuon_context_backend, dmuon_context_rank, dmuon_context_last_error, &
            dmuon_optimizer_create, dmuon_optimizer_destroy, dmuon_register, dmuon_optimizer_finalize, &
            dmuon_num_params, dmuon_param_id, dmuon_param_view, dmuon_param_numel, dmuon_set_external_grad, &
            dmuon_step, dmuon_synchronize, dmuon_mark_no_grad, dmuon_set_lr, dmuon_set_weight_decay, dmuon_set_betas, &
            dmuon_set_eps, dmuon_set_momentum, dmuon_set_max_grad_norm, dmuon_get_options, &
            dmuon_get_step_count, dmuon_get_clip_stats, dmuon_param_owner, dmuon_state_bytes, &
            dmuon_checkpoint_save, dmuon_checkpoint_restore, dmuon_checkpoint_set_attribute, &
            dmuon_checkpoint_get_attribute, dmuon_install_signal_handler, dmuon_request_checkpoint, &
            dmuon_checkpoint_requested, dmuon_views_epoch, dmuon_broadcast_params, dmuon_check_replicas
  ! Gradients and accumulation, schedules, metrics.
  public :: dmuon_zero_grad, dmuon_set_grad_accumulation, dmuon_get_grad_accumulation
  public :: dmuon_lr_schedule, DMUON_LR_CONSTANT, DMUON_LR_LINEAR, DMUON_LR_COSINE, DMUON_LR_STEP, &
            DMUON_LR_POLYNOMIAL, dmuon_set_lr_schedule, dmuon_get_lr_schedule
  public :: DMUON_METRICS_SUM, DMUON_METRICS_MEAN, DMUON_MAX_METRICS, dmuon_metrics_submit, dmuon_metrics_get
  public :: DMUON_MESSAGE_INFO, DMUON_MESSAGE_WARNING, dmuon_context_set_message_callback

  !> Metrics reduced with the next updating step: a real(c_double) array
  !> (host memory: the "cpu" backend), or a type(c_ptr) to n doubles of
  !> backend memory (device memory for "cuda"). The step reads them: the
  !> array must be a variable that lives, unchanged, until the step has run.
  interface dmuon_metrics_submit
    module procedure metrics_submit_array, metrics_submit_ptr
  end interface

  !> Communicators from `use mpi` (integer) and `use mpi_f08` (type(MPI_Comm)).
  interface dmuon_context_create
    module procedure context_create_int, context_create_f08
  end interface

  !> Views of a parameter's values and gradient: real(c_float) pointers for
  !> fp32, integer(c_int16_t) (raw bfloat16 bits) for bf16, of the
  !> parameter's own rank (1 to 4) and Fortran shape; a rank-1 pointer gives
  !> the flat view of a parameter of any rank. Valid until the optimizer is
  !> destroyed or the storage moves, which only a dmuon_checkpoint_restore
  !> that re-plans it does: its optional `views_moved` (or dmuon_views_epoch)
  !> says when to call dmuon_param_view again.
  interface dmuon_param_view
    module procedure view_f32_1, view_f32_2, view_f32_3, view_f32_4, &
                     view_bf16_1, view_bf16_2, view_bf16_3, view_bf16_4
  end interface

  !> Default kinds: the setters also take a default `real`, and the step
  !> count, element count and checkpoint step a default `integer`, beside
  !> real(c_double) and integer(c_int64_t) (default_kinds.inc). A default
  !> real literal such as 0.01 is rounded to single precision first: write
  !> 0.01d0 for the exact double.
  interface dmuon_set_lr
    module procedure dmuon_set_lr, set_lr_real
  end interface
  interface dmuon_set_weight_decay
    module procedure dmuon_set_weight_decay, set_weight_decay_real
  end interface
  interface dmuon_set_betas
    module procedure dmuon_set_betas, set_betas_real
  end interface
  interface dmuon_set_eps
    module procedure dmuon_set_eps, set_eps_real
  end interface
  interface dmuon_set_momentum
    module procedure dmuon_set_momentum, set_momentum_real
  end interface
  interface dmuon_set_max_grad_norm
    module procedure dmuon_set_max_grad_norm, set_max_grad_norm_real
  end interface
  interface dmuon_get_step_count
    module procedure dmuon_get_step_count, get_step_count_int
  end interface
  interface dmuon_param_numel
    module procedure dmuon_param_numel, param_numel_int
  end interface
  interface dmuon_checkpoint_save
    module procedure dmuon_checkpoint_save, checkpoint_save_int
  end interface

  ! Message of the last failure found by this module itself (not by C); ""
  ! when the last failure came from the C library.
  character(len=:), allocatable, save :: fortran_detail

  interface
    integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
  end interface

contains

  ! ------------------------------------------------------------- helpers

  !> A NUL-terminated C string as a Fortran string.
  function from_c(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function from_c

  !> Fortran string -> NUL-terminated C string (trailing blanks dropped).
  pure function to_c(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len_trim(s) + 1) :: c
    c = trim(s)//c_null_char
  end function to_c

  !> The text up to the NUL of a C buffer, blank-padded into s.
  subroutine buffer_to_string(buf, s)
    character(kind=c_char), intent(in) :: buf(:)
    character(len=*), intent(out) :: s
    integer :: i
    s = ""
    do i = 1, min(size(buf), len(s))
      if (buf(i) == c_null_char) exit
      s(i:i) = buf(i)
    end do
  end subroutine buffer_to_string

  !> The end of every wrapper: hand the status back, or report and stop.
  !> `detail` is given for failures this module found itself.
  subroutine check(status, ctx, call_name, ierr, detail)
    integer(c_int), intent(in) :: status
    type(c_ptr), intent(in) :: ctx
    character(len=*), intent(in) :: call_name
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: detail
    fortran_detail = ""
    if (present(detail)) fortran_detail = detail
    if (present(ierr)) then
      ierr = status
      return
    end if
    if (status == DMUON_SUCCESS) return
    write (error_unit, '(a)') "dmuon: "//call_name//" failed: "//dmuon_error_string(status)//": "// &
      last_error_of(ctx)
    flush (error_unit)
    error stop 1
  end subroutine check

  function last_error_of(ctx) result(s)
    type(c_ptr), intent(in) :: ctx
    character(len=:), allocatable :: s
    if (allocated(fortran_detail)) then
      if (len(fortran_detail) > 0) then
        s = fortran_detail
        return
      end if
    end if
    s = from_c(c_dmuon_context_last_error(ctx))
  end function last_error_of

  subroutine context_final(self)
    type(dmuon_context), intent(inout) :: self
    integer(c_int) :: status
    if (c_associated(self%ptr)) status = c_dmuon_context_destroy(self%ptr)
  end subroutine context_final

  subroutine optimizer_final(self)
    type(dmuon_optimizer), intent(inout) :: self
    integer(c_int) :: status
    if (c_associated(self%ptr)) status = c_dmuon_optimizer_destroy(self%ptr)
  end subroutine optimizer_final

  ! ------------------------------------------------------------- version and errors

  subroutine dmuon_get_version(major, minor, patch, ierr)
    integer, intent(out) :: major, minor, patch
    integer, intent(out), optional :: ierr
    integer(c_int) :: ma, mi, pa
    call check(c_dmuon_get_version(ma, mi, pa), c_null_ptr, "dmuon_get_version", ierr)
    major = ma; minor = mi; patch = pa
  end subroutine dmuon_get_version

  !> Compares the version this module was built from with the linked library.
  subroutine dmuon_check_version(ierr)
    integer, intent(out), optional :: ierr
    call check(c_dmuon_check_version(DMUON_VERSION_MAJOR, DMUON_VERSION_MINOR, DMUON_VERSION_PATCH), &
               c_null_ptr, "dmuon_check_version", ierr)
  end subroutine dmuon_check_version

  function dmuon_error_string(status) result(s)
    integer, intent(in) :: status
    character(len=:), allocatable :: s
    s = from_c(c_dmuon_error_string(int(status, c_int)))
  end function dmuon_error_string

  ! ------------------------------------------------------------- context

  subroutine context_create_int(comm, resource, ctx, ierr)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: resource
    type(dmuon_context), intent(out) :: ctx
    integer, intent(out), optional :: ierr
    call check(c_dmuon_context_create_f(int(comm, c_int), to_c(resource), ctx%ptr), c_null_ptr, &
               "dmuon_context_create", ierr)
  end subroutine context_create_int

  subroutine context_create_f08(comm, resource, ctx, ierr)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: resource
    type(dmuon_context), intent(out) :: ctx
    integer, intent(out), optional :: ierr
    call context_create_int(comm%MPI_VAL, resource, ctx, ierr)
  end subroutine context_create_f08

  !> Destroy the context (collective); harmless on a destroyed one. Its
  !> optimizers keep it alive until the last of them is destroyed, so the
  !> order of destroys (and of finalizers) does not matter.
  subroutine dmuon_context_destroy(ctx, ierr)
    type(dmuon_context), intent(inout) :: ctx
    integer, intent(out), optional :: ierr
    call check(c_dmuon_context_destroy(ctx%ptr), c_null_ptr, "dmuon_context_destroy", ierr)
  end subroutine dmuon_context_destroy

  subroutine dmuon_context_backend(ctx, name, ierr)
    type(dmuon_context), intent(in) :: ctx
    character(len=*), intent(out) :: name
    integer, intent(out), optional :: ierr
    character(kind=c_char) :: buf(64)
    integer(c_int) :: status
    status = c_dmuon_context_backend(ctx%ptr, buf, int(size(buf), c_size_t))
    name = ""
    if (status == DMUON_SUCCESS) call buffer_to_string(buf, name)
    call check(status, ctx%ptr, "dmuon_context_backend", ierr)
  end subroutine dmuon_context_backend

  subroutine dmuon_context_rank(ctx, rank, size, ierr)
    type(dmuon_context), intent(in) :: ctx
    integer, intent(out), optional :: rank, size
    integer, intent(out), optional :: ierr
    integer(c_int) :: r, s, status
    r = -1; s = 0
    status = c_dmuon_context_rank(ctx%ptr, r, s)
    if (present(rank)) rank = r
    if (present(size)) size = s
    call check(status, ctx%ptr, "dmuon_context_rank", ierr)
  end subroutine dmuon_context_rank

  !> The message of the last failed call on this context or its optimizers.
  function dmuon_context_last_error(ctx) result(s)
    type(dmuon_context), intent(in) :: ctx
    character(len=:), allocatable :: s
    s = last_error_of(ctx%ptr)
  end function dmuon_context_last_error

  ! ------------------------------------------------------------- optimizer and registration

  subroutine dmuon_optimizer_create(ctx, opt, options, ierr)
    type(dmuon_context), intent(in) :: ctx
    type(dmuon_optimizer), intent(out) :: opt
    type(dmuon_options), intent(in), optional :: options
    integer, intent(out), optional :: ierr
    type(dmuon_options) :: o
    if (present(options)) o = options
    o%struct_size = c_sizeof(o)
    opt%ctx = ctx%ptr
    allocate (opt%dtypes(0), opt%ndims(0), opt%shapes(8, 0))
    call check(c_dmuon_optimizer_create(ctx%ptr, o, opt%ptr), ctx%ptr, "dmuon_optimizer_create", ierr)
  end subroutine dmuon_optimizer_create

  !> Destroy the optimizer; harmless on a destroyed one.
  subroutine dmuon_optimizer_destroy(opt, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(out), optional :: ierr
    call check(c_dmuon_optimizer_destroy(opt%ptr), c_null_ptr, "dmuon_optimizer_destroy", ierr)
  end subroutine dmuon_optimizer_destroy

  !> Register a parameter of Fortran shape `shape` (reversed for the C library).
  !> `id` (optional) is the C id: 0, 1, ... in registration order.
  subroutine dmuon_register(opt, name, kind, dtype, shape, id, lr_mul, wd_mul, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    character(len=*), intent(in) :: name
    integer, intent(in) :: kind, dtype
    integer, intent(in) :: shape(:)
    integer, intent(out), optional :: id
    real(c_double), intent(in), optional :: lr_mul, wd_mul
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: c_shape(max(size(shape), 1))
    integer(c_int64_t), allocatable :: grown(:, :)
    real(c_double) :: lm, wm
    integer(c_int) :: cid, status
    integer :: n
    lm = 1; wm = 1
    if (present(lr_mul)) lm = lr_mul
    if (present(wd_mul)) wm = wd_mul
    c_shape = 1
    c_shape(1:size(shape)) = int(shape(size(shape):1:-1), c_int64_t)
    cid = -1
    status = c_dmuon_register(opt%ptr, to_c(name), int(kind, c_int), int(dtype, c_int), int(size(shape), c_int), &
                              c_shape, lm, wm, cid)
    if (status == DMUON_SUCCESS) then
      n = size(opt%ndims)
      allocate (grown(8, n + 1))
      grown = 1
      grown(:, 1:n) = opt%shapes
      grown(1:size(shape), n + 1) = int(shape, c_int64_t)
      call move_alloc(grown, opt%shapes)
      opt%ndims = [opt%ndims, size(shape)]
      opt%dtypes = [opt%dtypes, dtype]
    end if
    if (present(id)) id = cid
    call check(status, opt%ctx, "dmuon_register", ierr)
  end subroutine dmuon_register

  subroutine dmuon_optimizer_finalize(opt, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(out), optional :: ierr
    call check(c_dmuon_optimizer_finalize(opt%ptr), opt%ctx, "dmuon_optimizer_finalize", ierr)
  end subroutine dmuon_optimizer_finalize

  subroutine dmuon_num_params(opt, count, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer, intent(out) :: count
    integer, intent(out), optional :: ierr
    integer(c_int) :: c
    c = 0
    call check(c_dmuon_num_params(opt%ptr, c), opt%ctx, "dmuon_num_params", ierr)
    count = c
  end subroutine dmuon_num_params

  subroutine dmuon_param_id(opt, name, id, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    character(len=*), intent(in) :: name
    integer, intent(out) :: id
    integer, intent(out), optional :: ierr
    integer(c_int) :: c
    c = -1
    call check(c_dmuon_param_id(opt%ptr, to_c(name), c), opt%ctx, "dmuon_param_id", ierr)
    id = c
  end subroutine dmuon_param_id

  !> C pointers of parameter `id` plus the extents of a pointer of rank
  !> `rank`: its Fortran shape, or (numel) for the flat rank-1 view.
  subroutine view_pointers(opt, id, dtype, rank, pdata, pgrad, extents, status, detail)
    type(dmuon_optimizer), intent(in) :: opt
    integer, intent(in) :: id, dtype, rank
    type(c_ptr), intent(out) :: pdata, pgrad
    integer(c_int64_t), intent(out) :: extents(8)
    integer(c_int), intent(out) :: status
    character(len=*), intent(out) :: detail
    character(len=12) :: a, b
    detail = ""
    extents = 1
    status = c_dmuon_param_view(opt%ptr, int(id, c_int), pdata, pgrad)
    if (status /= DMUON_SUCCESS) return
    if (.not. allocated(opt%ndims)) then
      status = DMUON_ERR_INVALID_PARAM_ID
    else if (id + 1 > size(opt%ndims)) then
      status = DMUON_ERR_INVALID_PARAM_ID
    end if
    if (status /= DMUON_SUCCESS) then
      detail = "dmuon_param_view: parameter was not registered through the Fortran module"
      return
    end if
    if (opt%dtypes(id + 1) /= dtype) then
      status = DMUON_ERR_INVALID_DTYPE
      detail = "dmuon_param_view: pointer type does not match the parameter's dtype "// &
               "(real(c_float) for fp32, integer(c_int16_t) for bf16)"
    else if (rank == opt%ndims(id + 1)) then
      extents(1:rank) = opt%shapes(1:rank, id + 1)
    else if (rank == 1) then
      extents(1) = product(opt%shapes(:, id + 1))
    else
      write (a, '(i0)') rank
      write (b, '(i0)') opt%ndims(id + 1)
      status = DMUON_ERR_INVALID_SHAPE
      detail = "dmuon_param_view: a rank-"//trim(a)//" pointer for a parameter of rank "//trim(b)// &
               " (use its own rank, or rank 1 for the flat view)"
    end if
  end subroutine view_pointers

#include "param_views.inc"

  subroutine dmuon_param_numel(opt, id, numel, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer, intent(in) :: id
    integer(c_int64_t), intent(out) :: numel
    integer, intent(out), optional :: ierr
    numel = 0
    call check(c_dmuon_param_numel(opt%ptr, int(id, c_int), numel), opt%ctx, "dmuon_param_numel", ierr)
  end subroutine dmuon_param_numel

  !> `grad` is c_loc of a contiguous array with the TARGET attribute that
  !> outlives the optimizer (or c_null_ptr to remove it).
  subroutine dmuon_set_external_grad(opt, id, grad, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: id
    type(c_ptr), intent(in) :: grad
    integer, intent(out), optional :: ierr
    call check(c_dmuon_set_external_grad(opt%ptr, int(id, c_int), grad), opt%ctx, "dmuon_set_external_grad", ierr)
  end subroutine dmuon_set_external_grad

  !> How many times the flat storage moved since finalize (see the C call).
  subroutine dmuon_views_epoch(opt, epoch, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer(c_int64_t), intent(out) :: epoch
    integer, intent(out), optional :: ierr
    epoch = -1
    call check(c_dmuon_views_epoch(opt%ptr, epoch), opt%ctx, "dmuon_views_epoch", ierr)
  end subroutine dmuon_views_epoch

  !> Collective: every parameter takes rank `root`'s values.
  subroutine dmuon_broadcast_params(opt, root, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    call check(c_dmuon_broadcast_params(opt%ptr, int(root, c_int)), opt%ctx, "dmuon_broadcast_params", ierr)
  end subroutine dmuon_broadcast_params

  !> Collective: DMUON_ERR_REPLICAS_DIFFER when a replicated parameter differs across ranks.
  subroutine dmuon_check_replicas(opt, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer, intent(out), optional :: ierr
    call check(c_dmuon_check_replicas(opt%ptr), opt%ctx, "dmuon_check_replicas", ierr)
  end subroutine dmuon_check_replicas

  ! ------------------------------------------------------------- stepping and hyper-parameters

  subroutine dmuon_step(opt, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(out), optional :: ierr
    call check(c_dmuon_step(opt%ptr), opt%ctx, "dmuon_step", ierr)
  end subroutine dmuon_step

  !> Waits for the optimizer's enqueued device work (see dmuon_synchronize in dmuon.h).
  subroutine dmuon_synchronize(opt, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(out), optional :: ierr
    call check(c_dmuon_synchronize(opt%ptr), opt%ctx, "dmuon_synchronize", ierr)
  end subroutine dmuon_synchronize

  subroutine dmuon_mark_no_grad(opt, id, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: id
    integer, intent(out), optional :: ierr
    call check(c_dmuon_mark_no_grad(opt%ptr, int(id, c_int)), opt%ctx, "dmuon_mark_no_grad", ierr)
  end subroutine dmuon_mark_no_grad

  subroutine dmuon_set_lr(opt, kind, lr, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: kind
    real(c_double), intent(in) :: lr
    integer, intent(out), optional :: ierr
    call check(c_dmuon_set_lr(opt%ptr, int(kind, c_int), lr), opt%ctx, "dmuon_set_lr", ierr)
  end subroutine dmuon_set_lr

  subroutine dmuon_set_weight_decay(opt, kind, weight_decay, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: kind
    real(c_double), intent(in) :: weight_decay
    integer, intent(out), optional :: ierr
    call check(c_dmuon_set_weight_decay(opt%ptr, int(kind, c_int), weight_decay), opt%ctx, &
               "dmuon_set_weight_decay", ierr)
  end subroutine dmuon_set_weight_decay

  subroutine dmuon_set_betas(opt, beta1, beta2, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    real(c_double), intent(in) :: beta1, beta2
    integer, intent(out), optional :: ierr
    call check(c_dmuon_set_betas(opt%ptr, beta1, beta2), opt%ctx, "dmuon_set_betas", ierr)
  end subroutine dmuon_set_betas

  subroutine dmuon_set_eps(opt, eps, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    real(c_double), intent(in) :: eps
    integer, intent(out), optional :: ierr
    call check(c_dmuon_set_eps(opt%ptr, eps), opt%ctx, "dmuon_set_eps", ierr)
  end subroutine dmuon_set_eps

  subroutine dmuon_set_momentum(opt, momentum, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    real(c_double), intent(in) :: momentum
    integer, intent(out), optional :: ierr
    call check(c_dmuon_set_momentum(opt%ptr, momentum), opt%ctx, "dmuon_set_momentum", ierr)
  end subroutine dmuon_set_momentum

  subroutine dmuon_set_max_grad_norm(opt, max_norm, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    real(c_double), intent(in) :: max_norm
    integer, intent(out), optional :: ierr
    call check(c_dmuon_set_max_grad_norm(opt%ptr, max_norm), opt%ctx, "dmuon_set_max_grad_norm", ierr)
  end subroutine dmuon_set_max_grad_norm

  subroutine dmuon_get_options(opt, options, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    type(dmuon_options), intent(out) :: options
    integer, intent(out), optional :: ierr
    call check(c_dmuon_get_options(opt%ptr, options), opt%ctx, "dmuon_get_options", ierr)
  end subroutine dmuon_get_options

  subroutine dmuon_get_step_count(opt, steps, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer(c_int64_t), intent(out) :: steps
    integer, intent(out), optional :: ierr
    steps = 0
    call check(c_dmuon_get_step_count(opt%ptr, steps), opt%ctx, "dmuon_get_step_count", ierr)
  end subroutine dmuon_get_step_count

  subroutine dmuon_get_clip_stats(opt, stats, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    type(dmuon_clip_stats), intent(out) :: stats
    integer, intent(out), optional :: ierr
    call check(c_dmuon_get_clip_stats(opt%ptr, stats), opt%ctx, "dmuon_get_clip_stats", ierr)
  end subroutine dmuon_get_clip_stats

  ! ------------------------------------------------------------- ownership plan

  subroutine dmuon_param_owner(opt, id, rank, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer, intent(in) :: id
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: r
    r = -1
    call check(c_dmuon_param_owner(opt%ptr, int(id, c_int), r), opt%ctx, "dmuon_param_owner", ierr)
    rank = r
  end subroutine dmuon_param_owner

  subroutine dmuon_state_bytes(opt, bytes, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer(c_int64_t), intent(out) :: bytes
    integer, intent(out), optional :: ierr
    bytes = 0
    call check(c_dmuon_state_bytes(opt%ptr, bytes), opt%ctx, "dmuon_state_bytes", ierr)
  end subroutine dmuon_state_bytes

  ! ------------------------------------------------------------- checkpoints

  subroutine dmuon_checkpoint_save(opt, dir, user_step, options, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    character(len=*), intent(in) :: dir
    integer(c_int64_t), intent(in) :: user_step
    type(dmuon_checkpoint_options), intent(in), optional :: options
    integer, intent(out), optional :: ierr
    type(dmuon_checkpoint_options) :: o
    if (present(options)) o = options
    o%struct_size = c_sizeof(o)
    call check(c_dmuon_checkpoint_save(opt%ptr, to_c(dir), user_step, o), opt%ctx, "dmuon_checkpoint_save", ierr)
  end subroutine dmuon_checkpoint_save

  !> On success the pointers from dmuon_param_view stay valid, unless the
  !> restore had to re-plan the storage: then `views_moved` (optional, after
  !> ierr as in HDF5's wrappers) is .true. and the views must be taken again.
  !> (The module cannot reach the pointer variables a program holds.)
  subroutine dmuon_checkpoint_restore(opt, path, user_step, ierr, views_moved)
    type(dmuon_optimizer), intent(inout) :: opt
    character(len=*), intent(in) :: path
    integer(c_int64_t), intent(out), optional :: user_step
    integer, intent(out), optional :: ierr
    logical, intent(out), optional :: views_moved
    integer(c_int64_t) :: s, before, after
    integer(c_int) :: status
    s = 0
    before = -1
    after = -1
    ! Read only when the restore can succeed, so that the query never
    ! replaces the message of a failed restore.
    status = c_dmuon_views_epoch(opt%ptr, before)
    status = c_dmuon_checkpoint_restore(opt%ptr, to_c(path), s)
    if (status == DMUON_SUCCESS) status = c_dmuon_views_epoch(opt%ptr, after)
    if (present(views_moved)) views_moved = status == DMUON_SUCCESS .and. after /= before
    call check(status, opt%ctx, "dmuon_checkpoint_restore", ierr)
    if (present(user_step)) user_step = s
  end subroutine dmuon_checkpoint_restore

  subroutine dmuon_checkpoint_set_attribute(opt, key, value, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    character(len=*), intent(in) :: key, value
    integer, intent(out), optional :: ierr
    call check(c_dmuon_checkpoint_set_attribute(opt%ptr, to_c(key), to_c(value)), opt%ctx, &
               "dmuon_checkpoint_set_attribute", ierr)
  end subroutine dmuon_checkpoint_set_attribute

  !> `value` receives the attribute, blank-padded; one longer than len(value)
  !> is refused by the library (buffer too small).
  subroutine dmuon_checkpoint_get_attribute(opt, key, value, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    character(len=*), intent(in) :: key
    character(len=*), intent(out) :: value
    integer, intent(out), optional :: ierr
    character(kind=c_char) :: buf(len(value) + 1)
    integer(c_int) :: status
    status = c_dmuon_checkpoint_get_attribute(opt%ptr, to_c(key), buf, int(size(buf), c_size_t))
    value = ""
    if (status == DMUON_SUCCESS) call buffer_to_string(buf, value)
    call check(status, opt%ctx, "dmuon_checkpoint_get_attribute", ierr)
  end subroutine dmuon_checkpoint_get_attribute

  ! ------------------------------------------------------------- checkpoint requests

  subroutine dmuon_install_signal_handler(ctx, signum, ierr)
    type(dmuon_context), intent(inout) :: ctx
    integer, intent(in) :: signum
    integer, intent(out), optional :: ierr
    call check(c_dmuon_install_signal_handler(ctx%ptr, int(signum, c_int)), ctx%ptr, &
               "dmuon_install_signal_handler", ierr)
  end subroutine dmuon_install_signal_handler

  subroutine dmuon_request_checkpoint(ctx, ierr)
    type(dmuon_context), intent(inout) :: ctx
    integer, intent(out), optional :: ierr
    call check(c_dmuon_request_checkpoint(ctx%ptr), ctx%ptr, "dmuon_request_checkpoint", ierr)
  end subroutine dmuon_request_checkpoint

  !> Collective: .true. on every rank when any rank's request flag was set.
  subroutine dmuon_checkpoint_requested(ctx, requested, ierr)
    type(dmuon_context), intent(inout) :: ctx
    logical, intent(out) :: requested
    integer, intent(out), optional :: ierr
    integer(c_int) :: r
    r = 0
    call check(c_dmuon_checkpoint_requested(ctx%ptr, r), ctx%ptr, "dmuon_checkpoint_requested", ierr)
    requested = r /= 0
  end subroutine dmuon_checkpoint_requested

  ! ------------------------------------------------------------- gradients and accumulation

  !> Zero every gradient view and start a new accumulation cycle.
  subroutine dmuon_zero_grad(opt, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(out), optional :: ierr
    call check(c_dmuon_zero_grad(opt%ptr), opt%ctx, "dmuon_zero_grad", ierr)
  end subroutine dmuon_zero_grad

  !> Step once every micro_batches calls of dmuon_step, on the mean of the
  !> gradients added (+=) into the views meanwhile.
  subroutine dmuon_set_grad_accumulation(opt, micro_batches, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: micro_batches
    integer, intent(out), optional :: ierr
    call check(c_dmuon_set_grad_accumulation(opt%ptr, int(micro_batches, c_int)), opt%ctx, &
               "dmuon_set_grad_accumulation", ierr)
  end subroutine dmuon_set_grad_accumulation

  subroutine dmuon_get_grad_accumulation(opt, micro_batches, pending, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer, intent(out), optional :: micro_batches, pending
    integer, intent(out), optional :: ierr
    integer(c_int) :: every, counted, status
    every = 1; counted = 0
    status = c_dmuon_get_grad_accumulation(opt%ptr, every, counted)
    if (present(micro_batches)) micro_batches = every
    if (present(pending)) pending = counted
    call check(status, opt%ctx, "dmuon_get_grad_accumulation", ierr)
  end subroutine dmuon_get_grad_accumulation

  ! ------------------------------------------------------------- learning-rate schedules

  !> Give group `kind` a schedule; without `schedule`, remove the group's.
  subroutine dmuon_set_lr_schedule(opt, kind, schedule, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: kind
    type(dmuon_lr_schedule), intent(in), optional, target :: schedule
    integer, intent(out), optional :: ierr
    type(dmuon_lr_schedule), target :: s
    type(c_ptr) :: p
    p = c_null_ptr
    if (present(schedule)) then
      s = schedule
      s%struct_size = c_sizeof(s)
      p = c_loc(s)
    end if
    call check(c_dmuon_set_lr_schedule(opt%ptr, int(kind, c_int), p), opt%ctx, "dmuon_set_lr_schedule", ierr)
  end subroutine dmuon_set_lr_schedule

  !> The schedule of group `kind` and the steps taken under it;
  !> DMUON_ERR_NOT_FOUND when the group has none.
  subroutine dmuon_get_lr_schedule(opt, kind, schedule, steps, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    integer, intent(in) :: kind
    type(dmuon_lr_schedule), intent(out), optional :: schedule
    integer(c_int64_t), intent(out), optional :: steps
    integer, intent(out), optional :: ierr
    type(dmuon_lr_schedule) :: s
    integer(c_int64_t) :: n
    integer(c_int) :: status
    n = 0
    status = c_dmuon_get_lr_schedule(opt%ptr, int(kind, c_int), s, n)
    if (present(schedule)) schedule = s
    if (present(steps)) steps = n
    call check(status, opt%ctx, "dmuon_get_lr_schedule", ierr)
  end subroutine dmuon_get_lr_schedule

  ! ------------------------------------------------------------- metrics

  subroutine metrics_submit_array(opt, values, op, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    real(c_double), intent(in), target, contiguous :: values(:)
    integer, intent(in) :: op
    integer, intent(out), optional :: ierr
    call metrics_submit_ptr(opt, size(values), c_loc(values), op, ierr)
  end subroutine metrics_submit_array

  subroutine metrics_submit_ptr(opt, n, values, op, ierr)
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: n
    type(c_ptr), intent(in) :: values
    integer, intent(in) :: op
    integer, intent(out), optional :: ierr
    call check(c_dmuon_metrics_submit(opt%ptr, int(n, c_int), values, int(op, c_int)), opt%ctx, &
               "dmuon_metrics_submit", ierr)
  end subroutine metrics_submit_ptr

  !> The metrics of the last step that reduced some, size(values) of them.
  subroutine dmuon_metrics_get(opt, values, ierr)
    type(dmuon_optimizer), intent(in) :: opt
    real(c_double), intent(out) :: values(:)
    integer, intent(out), optional :: ierr
    real(c_double) :: buf(max(1, size(values)))
    integer(c_int) :: status
    buf = 0
    status = c_dmuon_metrics_get(opt%ptr, int(size(values), c_int), buf)
    values = buf(1:size(values))
    call check(status, opt%ctx, "dmuon_metrics_get", ierr)
  end subroutine dmuon_metrics_get

  ! ------------------------------------------------------------- messages

  !> Hear the library's messages: `fn` is c_funloc of a bind(C) subroutine
  !> `(integer(c_int), value :: level; type(c_ptr), value :: text;
  !> type(c_ptr), value :: user_data)`, text a NUL-terminated C string valid
  !> during the call; c_null_funptr stops them.
  subroutine dmuon_context_set_message_callback(ctx, fn, user_data, ierr)
    type(dmuon_context), intent(inout) :: ctx
    type(c_funptr), intent(in) :: fn
    type(c_ptr), intent(in), optional :: user_data
    integer, intent(out), optional :: ierr
    type(c_ptr) :: user
    user = c_null_ptr
    if (present(user_data)) user = user_data
    call check(c_dmuon_context_set_message_callback(ctx%ptr, fn, user), ctx%ptr, &
               "dmuon_context_set_message_callback", ierr)
  end subroutine dmuon_context_set_message_callback

#include "default_kinds.inc"

end module dmuon
