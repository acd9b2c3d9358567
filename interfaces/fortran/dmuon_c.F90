! dmuon_c: the raw ISO_C_BINDING interfaces of include/dmuon/dmuon.h, one per C
! call, plus the interoperable structs and the enum constants. The Fortran
! names carry a c_ prefix so that the friendly wrappers in module dmuon can use
! the C names. Most programs `use dmuon` and never touch this module.
module dmuon_c
  use, intrinsic :: iso_c_binding
  implicit none
  private
  public :: c_int, c_int64_t, c_double, c_float, c_size_t, c_ptr, c_null_ptr, c_char, c_null_char, &
            c_int16_t, c_associated, c_loc, c_f_pointer

  ! Status codes and the version, generated at configure time from dmuon.h
  ! (the header's X-macro list stays the only place they are written down).
#include "dmuon_constants.inc"

  ! dmuon_kind_t, dmuon_dtype_t, dmuon_ns_schedule_t, dmuon_muon_scale_t
  integer(c_int), parameter, public :: DMUON_KIND_MUON = 0, DMUON_KIND_ADAM = 1
  integer(c_int), parameter, public :: DMUON_DTYPE_FP32 = 0, DMUON_DTYPE_BF16 = 1
  integer(c_int), parameter, public :: DMUON_NS_QUINTIC = 0, DMUON_NS_POLAR_EXPRESS = 1
  integer(c_int), parameter, public :: DMUON_SCALE_ORIGINAL = 0, DMUON_SCALE_MATCH_ADAMW_RMS = 1
  integer(c_int32_t), parameter, public :: DMUON_OPTIONS_MAGIC = int(z'646d756f', c_int32_t)

  !> Mirror of dmuon_options_t with the defaults of DMUON_OPTIONS_INIT: its
  !> components are generated from DMUON_OPTIONS_LIST in dmuon.h at configure
  !> time (interfaces/fortran/CMakeLists.txt), so they cannot drift from C;
  !> test_f_options compares the defaults and the layout with the C library's.
  !> struct_size is filled by the wrappers (c_sizeof is not a constant expression).
  type, bind(C), public :: dmuon_options
    integer(c_size_t) :: struct_size = 0
    integer(c_int32_t) :: magic = DMUON_OPTIONS_MAGIC
    integer(c_int32_t) :: version = DMUON_OPTIONS_VERSION
#include "dmuon_options_type.inc"
  end type dmuon_options

  !> Mirror of dmuon_clip_stats_t (flags are C ints: 0 or 1).
  type, bind(C), public :: dmuon_clip_stats
    real(c_double) :: total_norm = 0
    real(c_double) :: clip_coef = 1
    integer(c_int) :: clipped = 0
    integer(c_int) :: found_inf = 0
    integer(c_int) :: step_skipped = 0
  end type dmuon_clip_stats

  !> Mirror of dmuon_checkpoint_options_t, defaults of DMUON_CHECKPOINT_OPTIONS_INIT.
  type, bind(C), public :: dmuon_checkpoint_options
    integer(c_size_t) :: struct_size = 0
    integer(c_int32_t) :: magic = DMUON_OPTIONS_MAGIC
    integer(c_int32_t) :: version = DMUON_OPTIONS_VERSION
    integer(c_int) :: keep_last = 3
  end type dmuon_checkpoint_options

  public :: c_dmuon_get_version, c_dmuon_check_version, c_dmuon_error_string, c_dmuon_context_create_f, &
            c_dmuon_context_destroy, c_dmuon_context_backend, c_dmuon_context_rank, c_dmuon_context_last_error, &
            c_dmuon_optimizer_create, c_dmuon_optimizer_destroy, c_dmuon_register, c_dmuon_optimizer_finalize, &
            c_dmuon_num_params, c_dmuon_param_id, c_dmuon_param_view, c_dmuon_param_numel, &
            c_dmuon_set_external_grad, c_dmuon_step, c_dmuon_synchronize, c_dmuon_mark_no_grad, c_dmuon_set_lr, &
            c_dmuon_set_weight_decay, c_dmuon_set_betas, c_dmuon_set_eps, c_dmuon_set_momentum, &
            c_dmuon_set_max_grad_norm, c_dmuon_get_options, c_dmuon_get_step_count, c_dmuon_get_clip_stats, &
            c_dmuon_param_owner, c_dmuon_state_bytes, c_dmuon_checkpoint_save, c_dmuon_checkpoint_restore, &
            c_dmuon_checkpoint_set_attribute, c_dmuon_checkpoint_get_attribute, &
            c_dmuon_views_epoch, c_dmuon_broadcast_params, c_dmuon_check_replicas, &
            c_dmuon_install_signal_handler, c_dmuon_request_checkpoint, c_dmuon_checkpoint_requested
  ! Gradients and accumulation, schedules, metrics.
  public :: c_dmuon_zero_grad, c_dmuon_set_grad_accumulation, c_dmuon_get_grad_accumulation
  public :: c_dmuon_set_lr_schedule, c_dmuon_get_lr_schedule
  public :: c_dmuon_metrics_submit, c_dmuon_metrics_get
  public :: c_dmuon_context_set_message_callback
  integer(c_int), parameter, public :: DMUON_MESSAGE_INFO = 0, DMUON_MESSAGE_WARNING = 1
  integer(c_int), parameter, public :: DMUON_METRICS_SUM = 0, DMUON_METRICS_MEAN = 1, DMUON_MAX_METRICS = 32

  integer(c_int), parameter, public :: DMUON_LR_CONSTANT = 0, DMUON_LR_LINEAR = 1, DMUON_LR_COSINE = 2, &
                                       DMUON_LR_STEP = 3, DMUON_LR_POLYNOMIAL = 4

  !> Mirror of dmuon_lr_schedule_t, defaults of DMUON_LR_SCHEDULE_INIT
  !> (struct_size filled by the wrappers).
  type, bind(C), public :: dmuon_lr_schedule
    integer(c_size_t) :: struct_size = 0
    integer(c_int32_t) :: magic = DMUON_OPTIONS_MAGIC
    integer(c_int32_t) :: version = DMUON_OPTIONS_VERSION
    integer(c_int) :: kind = DMUON_LR_CONSTANT
    real(c_double) :: base_lr = -1
    integer(c_int64_t) :: warmup_steps = 0
    integer(c_int64_t) :: total_steps = 0
    real(c_double) :: final_lr = 0
    real(c_double) :: power = 1
    integer(c_int64_t) :: step_size = 1
    real(c_double) :: gamma = 0.1d0
  end type dmuon_lr_schedule

  interface
    integer(c_int) function c_dmuon_get_version(major, minor, patch) bind(C, name="dmuon_get_version")
      import :: c_int
      integer(c_int), intent(out) :: major, minor, patch
    end function
    integer(c_int) function c_dmuon_check_version(major, minor, patch) bind(C, name="dmuon_check_version")
      import :: c_int
      integer(c_int), value :: major, minor, patch
    end function
    type(c_ptr) function c_dmuon_error_string(status) bind(C, name="dmuon_error_string")
      import :: c_int, c_ptr
      integer(c_int), value :: status
    end function
    ! MPI_Fint is a C int in every MPI we know of (Fortran default INTEGER).
    integer(c_int) function c_dmuon_context_create_f(comm, resource, ctx) bind(C, name="dmuon_context_create_f")
      import :: c_int, c_char, c_ptr
      integer(c_int), value :: comm
      character(kind=c_char), intent(in) :: resource(*)
      type(c_ptr), intent(out) :: ctx
    end function
    integer(c_int) function c_dmuon_context_destroy(ctx) bind(C, name="dmuon_context_destroy")
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: ctx
    end function
    integer(c_int) function c_dmuon_context_backend(ctx, buf, len) bind(C, name="dmuon_context_backend")
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: ctx
      character(kind=c_char), intent(out) :: buf(*)
      integer(c_size_t), value :: len
    end function
    integer(c_int) function c_dmuon_context_rank(ctx, rank, size) bind(C, name="dmuon_context_rank")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), intent(out) :: rank, size
    end function
    type(c_ptr) function c_dmuon_context_last_error(ctx) bind(C, name="dmuon_context_last_error")
      import :: c_ptr
      type(c_ptr), value :: ctx
    end function
    integer(c_int) function c_dmuon_optimizer_create(ctx, options, opt) bind(C, name="dmuon_optimizer_create")
      import :: c_int, c_ptr, dmuon_options
      type(c_ptr), value :: ctx
      type(dmuon_options), intent(in) :: options
      type(c_ptr), intent(out) :: opt
    end function
    integer(c_int) function c_dmuon_optimizer_destroy(opt) bind(C, name="dmuon_optimizer_destroy")
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: opt
    end function
    integer(c_int) function c_dmuon_register(opt, name, kind, dtype, ndim, shape, lr_mul, wd_mul, id) &
        bind(C, name="dmuon_register")
      import :: c_int, c_ptr, c_char, c_int64_t, c_double
      type(c_ptr), value :: opt
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: kind, dtype, ndim
      integer(c_int64_t), intent(in) :: shape(*)
      real(c_double), value :: lr_mul, wd_mul
      integer(c_int), intent(out) :: id
    end function
    integer(c_int) function c_dmuon_optimizer_finalize(opt) bind(C, name="dmuon_optimizer_finalize")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
    end function
    integer(c_int) function c_dmuon_num_params(opt, count) bind(C, name="dmuon_num_params")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), intent(out) :: count
    end function
    integer(c_int) function c_dmuon_param_id(opt, name, id) bind(C, name="dmuon_param_id")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: opt
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), intent(out) :: id
    end function
    integer(c_int) function c_dmuon_param_view(opt, id, data, grad) bind(C, name="dmuon_param_view")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), value :: id
      type(c_ptr), intent(out) :: data, grad
    end function
    integer(c_int) function c_dmuon_param_numel(opt, id, numel) bind(C, name="dmuon_param_numel")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: opt
      integer(c_int), value :: id
      integer(c_int64_t), intent(out) :: numel
    end function
    integer(c_int) function c_dmuon_set_external_grad(opt, id, grad) bind(C, name="dmuon_set_external_grad")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt, grad
      integer(c_int), value :: id
    end function
    integer(c_int) function c_dmuon_views_epoch(opt, epoch) bind(C, name="dmuon_views_epoch")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: opt
      integer(c_int64_t), intent(out) :: epoch
    end function
    integer(c_int) function c_dmuon_broadcast_params(opt, root) bind(C, name="dmuon_broadcast_params")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), value :: root
    end function
    integer(c_int) function c_dmuon_check_replicas(opt) bind(C, name="dmuon_check_replicas")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
    end function
    integer(c_int) function c_dmuon_step(opt) bind(C, name="dmuon_step")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
    end function
    integer(c_int) function c_dmuon_synchronize(opt) bind(C, name="dmuon_synchronize")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
    end function
    integer(c_int) function c_dmuon_mark_no_grad(opt, id) bind(C, name="dmuon_mark_no_grad")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), value :: id
    end function
    integer(c_int) function c_dmuon_set_lr(opt, kind, lr) bind(C, name="dmuon_set_lr")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: opt
      integer(c_int), value :: kind
      real(c_double), value :: lr
    end function
    integer(c_int) function c_dmuon_set_weight_decay(opt, kind, wd) bind(C, name="dmuon_set_weight_decay")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: opt
      integer(c_int), value :: kind
      real(c_double), value :: wd
    end function
    integer(c_int) function c_dmuon_set_betas(opt, beta1, beta2) bind(C, name="dmuon_set_betas")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: opt
      real(c_double), value :: beta1, beta2
    end function
    integer(c_int) function c_dmuon_set_eps(opt, eps) bind(C, name="dmuon_set_eps")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: opt
      real(c_double), value :: eps
    end function
    integer(c_int) function c_dmuon_set_momentum(opt, momentum) bind(C, name="dmuon_set_momentum")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: opt
      real(c_double), value :: momentum
    end function
    integer(c_int) function c_dmuon_set_max_grad_norm(opt, max_norm) bind(C, name="dmuon_set_max_grad_norm")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: opt
      real(c_double), value :: max_norm
    end function
    integer(c_int) function c_dmuon_get_options(opt, options) bind(C, name="dmuon_get_options")
      import :: c_int, c_ptr, dmuon_options
      type(c_ptr), value :: opt
      type(dmuon_options), intent(out) :: options
    end function
    integer(c_int) function c_dmuon_get_step_count(opt, steps) bind(C, name="dmuon_get_step_count")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: opt
      integer(c_int64_t), intent(out) :: steps
    end function
    integer(c_int) function c_dmuon_get_clip_stats(opt, stats) bind(C, name="dmuon_get_clip_stats")
      import :: c_int, c_ptr, dmuon_clip_stats
      type(c_ptr), value :: opt
      type(dmuon_clip_stats), intent(out) :: stats
    end function
    integer(c_int) function c_dmuon_param_owner(opt, id, rank) bind(C, name="dmuon_param_owner")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), value :: id
      integer(c_int), intent(out) :: rank
    end function
    integer(c_int) function c_dmuon_state_bytes(opt, bytes) bind(C, name="dmuon_state_bytes")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: opt
      integer(c_int64_t), intent(out) :: bytes
    end function
    integer(c_int) function c_dmuon_checkpoint_save(opt, dir, user_step, options) bind(C, name="dmuon_checkpoint_save")
      import :: c_int, c_ptr, c_char, c_int64_t, dmuon_checkpoint_options
      type(c_ptr), value :: opt
      character(kind=c_char), intent(in) :: dir(*)
      integer(c_int64_t), value :: user_step
      type(dmuon_checkpoint_options), intent(in) :: options
    end function
    integer(c_int) function c_dmuon_checkpoint_restore(opt, path, user_step) bind(C, name="dmuon_checkpoint_restore")
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: opt
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int64_t), intent(out) :: user_step
    end function
    integer(c_int) function c_dmuon_checkpoint_set_attribute(opt, key, value) &
        bind(C, name="dmuon_checkpoint_set_attribute")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: opt
      character(kind=c_char), intent(in) :: key(*), value(*)
    end function
    integer(c_int) function c_dmuon_checkpoint_get_attribute(opt, key, buf, len) &
        bind(C, name="dmuon_checkpoint_get_attribute")
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: opt
      character(kind=c_char), intent(in) :: key(*)
      character(kind=c_char), intent(out) :: buf(*)
      integer(c_size_t), value :: len
    end function
    integer(c_int) function c_dmuon_install_signal_handler(ctx, signum) bind(C, name="dmuon_install_signal_handler")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: signum
    end function
    integer(c_int) function c_dmuon_request_checkpoint(ctx) bind(C, name="dmuon_request_checkpoint")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
    end function
    integer(c_int) function c_dmuon_checkpoint_requested(ctx, requested) bind(C, name="dmuon_checkpoint_requested")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), intent(out) :: requested
    end function
    ! ----------------------------------------------------------- gradients and accumulation
    integer(c_int) function c_dmuon_zero_grad(opt) bind(C, name="dmuon_zero_grad")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
    end function
    integer(c_int) function c_dmuon_set_grad_accumulation(opt, micro_batches) &
        bind(C, name="dmuon_set_grad_accumulation")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), value :: micro_batches
    end function
    integer(c_int) function c_dmuon_get_grad_accumulation(opt, micro_batches, pending) &
        bind(C, name="dmuon_get_grad_accumulation")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), intent(out) :: micro_batches, pending
    end function
    ! ----------------------------------------------------------- learning-rate schedules
    integer(c_int) function c_dmuon_set_lr_schedule(opt, kind, schedule) bind(C, name="dmuon_set_lr_schedule")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), value :: kind
      type(c_ptr), value :: schedule
    end function
    integer(c_int) function c_dmuon_get_lr_schedule(opt, kind, schedule, steps) bind(C, name="dmuon_get_lr_schedule")
      import :: c_int, c_ptr, c_int64_t, dmuon_lr_schedule
      type(c_ptr), value :: opt
      integer(c_int), value :: kind
      type(dmuon_lr_schedule), intent(out) :: schedule
      integer(c_int64_t), intent(out) :: steps
    end function
    ! ----------------------------------------------------------- metrics
    integer(c_int) function c_dmuon_metrics_submit(opt, n, values, op) bind(C, name="dmuon_metrics_submit")
      import :: c_int, c_ptr
      type(c_ptr), value :: opt
      integer(c_int), value :: n
      type(c_ptr), value :: values
      integer(c_int), value :: op
    end function
    integer(c_int) function c_dmuon_metrics_get(opt, n, values) bind(C, name="dmuon_metrics_get")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: opt
      integer(c_int), value :: n
      real(c_double), intent(out) :: values(*)
    end function
    ! ----------------------------------------------------------- messages
    integer(c_int) function c_dmuon_context_set_message_callback(ctx, fn, user_data) &
        bind(C, name="dmuon_context_set_message_callback")
      import :: c_int, c_ptr, c_funptr
      type(c_ptr), value :: ctx
      type(c_funptr), value :: fn
      type(c_ptr), value :: user_data
    end function
  end interface
end module dmuon_c
