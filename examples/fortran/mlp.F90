! The MLP of the C example (tanh hidden layers, linear output), written the
! Fortran way: activations batch-first a(batch, width), weights viewed from
! dmuon's storage as w(n_in, n_out), so a layer is matmul(a, w). Registered
! with Fortran shape [n_in, n_out], each weight is the C example's
! [n_out, n_in] matrix: the same model, the same checkpoints.
! On the cuda backend the views are device memory: this host code then works
! on host mirrors, pulled before and pushed after each pass (mlp_pull_params,
! mlp_push_grads), as the C example does.
module mlp_model
  use, intrinsic :: iso_c_binding, only: c_float, c_double, c_int, c_size_t, c_ptr, c_loc, c_associated
  use dmuon
  implicit none
  private

  type :: layer
    integer :: id_w, id_b
    ! what the passes use: dmuon's views, or host mirrors of them
    real(c_float), pointer :: w(:, :) => null(), gw(:, :) => null(), b(:) => null(), gb(:) => null()
    real(c_float), pointer :: view_w(:, :) => null(), view_gw(:, :) => null()
    real(c_float), pointer :: view_b(:) => null(), view_gb(:) => null()
    real(c_float), allocatable :: a(:, :)  ! the layer's input activations (batch, n_in)
  end type layer

  type, public :: mlp
    integer :: n_linear, batch
    logical :: mirrored = .false.
    integer, allocatable :: dims(:)  ! dims(0:n_linear): n_in, hidden..., 1
    type(layer), allocatable :: layers(:)
  end type mlp

#ifdef DMUON_EXAMPLE_CUDA
  interface
    integer(c_int) function cudaMemcpy(dst, src, bytes, kind) bind(C, name="cudaMemcpy")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: dst, src
      integer(c_size_t), value :: bytes
      integer(c_int), value :: kind  ! 4: cudaMemcpyDefault (unified addressing tells the direction)
    end function cudaMemcpy
  end interface
#endif

  public :: mlp_register, mlp_bind, mlp_init, mlp_train_batch, mlp_pull_params, mlp_push_grads

contains

  !> Copies n floats between host and device (a mirror and a view).
  subroutine copy_floats(dst, src, n)
    type(c_ptr), intent(in) :: dst, src
    integer, intent(in) :: n
#ifdef DMUON_EXAMPLE_CUDA
    if (cudaMemcpy(dst, src, int(n, c_size_t) * 4_c_size_t, 4_c_int) /= 0) error stop "cudaMemcpy failed"
#else
    ! unreachable: without CUDA no backend gives device views
    if (c_associated(dst) .or. c_associated(src) .or. n > 0) error stop "copy_floats: built without CUDA"
#endif
  end subroutine copy_floats

  !> Muon on the hidden-to-hidden weights (with use_muon), AdamW on the rest.
  subroutine mlp_register(m, opt, n_in, hidden, n_hidden, use_muon)
    type(mlp), intent(out) :: m
    type(dmuon_optimizer), intent(inout) :: opt
    integer, intent(in) :: n_in, hidden, n_hidden
    logical, intent(in) :: use_muon
    integer :: l, kind
    character(len=32) :: name
    m%n_linear = n_hidden + 1
    allocate (m%dims(0:m%n_linear), m%layers(m%n_linear))
    m%dims = hidden
    m%dims(0) = n_in
    m%dims(m%n_linear) = 1
    do l = 1, m%n_linear
      kind = DMUON_KIND_ADAM
      if (use_muon .and. l > 1 .and. l < m%n_linear) kind = DMUON_KIND_MUON
      ! names as in the C example, which counts layers from 0
      write (name, '("layer",i0,".weight")') l - 1
      call dmuon_register(opt, name, kind, DMUON_DTYPE_FP32, [m%dims(l - 1), m%dims(l)], m%layers(l)%id_w)
      write (name, '("layer",i0,".bias")') l - 1
      call dmuon_register(opt, name, DMUON_KIND_ADAM, DMUON_DTYPE_FP32, [m%dims(l)], m%layers(l)%id_b, &
                          wd_mul=0d0)
    end do
  end subroutine mlp_register

  !> After dmuon_optimizer_finalize and after dmuon_checkpoint_restore (a
  !> restore may move dmuon's storage): the views (on_device: device memory,
  !> then host mirrors are allocated), and the activation storage. Call it once.
  subroutine mlp_bind(m, opt, batch, on_device)
    type(mlp), intent(inout) :: m
    type(dmuon_optimizer), intent(in) :: opt
    integer, intent(in) :: batch
    logical, intent(in) :: on_device
    integer :: l
    m%batch = batch
    m%mirrored = on_device
    do l = 1, m%n_linear
      associate (y => m%layers(l))
        call dmuon_param_view(opt, y%id_w, y%view_w, y%view_gw)
        call dmuon_param_view(opt, y%id_b, y%view_b, y%view_gb)
        if (on_device) then
          allocate (y%w(m%dims(l - 1), m%dims(l)), y%gw(m%dims(l - 1), m%dims(l)), y%b(m%dims(l)), y%gb(m%dims(l)))
        else
          y%w => y%view_w
          y%gw => y%view_gw
          y%b => y%view_b
          y%gb => y%view_gb
        end if
        allocate (y%a(batch, m%dims(l - 1)))
      end associate
    end do
  end subroutine mlp_bind

  !> Mirrored only: copy the parameters to the host. The copy runs on the
  !> default stream, which dmuon_step orders after the step: no wait needed.
  subroutine mlp_pull_params(m)
    type(mlp), intent(inout) :: m
    integer :: l
    if (.not. m%mirrored) return
    do l = 1, m%n_linear
      call copy_floats(c_loc(m%layers(l)%w), c_loc(m%layers(l)%view_w), size(m%layers(l)%w))
      call copy_floats(c_loc(m%layers(l)%b), c_loc(m%layers(l)%view_b), size(m%layers(l)%b))
    end do
  end subroutine mlp_pull_params

  !> Mirrored only: copy the gradients (or, with params, the parameters) to dmuon's views.
  subroutine mlp_push_grads(m, params)
    type(mlp), intent(inout) :: m
    logical, intent(in), optional :: params
    integer :: l
    if (.not. m%mirrored) return
    do l = 1, m%n_linear
      associate (y => m%layers(l))
        if (present(params)) then
          call copy_floats(c_loc(y%view_w), c_loc(y%w), size(y%w))
          call copy_floats(c_loc(y%view_b), c_loc(y%b), size(y%b))
        else
          call copy_floats(c_loc(y%view_gw), c_loc(y%gw), size(y%gw))
          call copy_floats(c_loc(y%view_gb), c_loc(y%gb), size(y%gb))
        end if
      end associate
    end do
  end subroutine mlp_push_grads

  !> Uniform(-1/sqrt(n_in), 1/sqrt(n_in)) weights in the C example's order, zero biases.
  subroutine mlp_init(m, seed)
    use burgers_sim, only: rng_seed, rng_uniform
    type(mlp), intent(inout) :: m
    integer, intent(in) :: seed
    integer(8) :: s
    integer :: l, i, o
    double precision :: bound
    do l = 1, m%n_linear
      bound = 1d0 / sqrt(dble(m%dims(l - 1)))
      s = rng_seed(seed, 1, l - 1)
      do o = 1, m%dims(l)
        do i = 1, m%dims(l - 1)
          m%layers(l)%w(i, o) = real((2d0 * rng_uniform(s) - 1d0) * bound, c_float)
        end do
      end do
      m%layers(l)%b = 0
    end do
    call mlp_push_grads(m, params=.true.)
  end subroutine mlp_init

  !> Forward and backward of the mean squared error over x(batch, n_in)
  !> against t(batch); writes dmuon's gradient views, returns the loss.
  function mlp_train_batch(m, x, t) result(loss)
    type(mlp), intent(inout) :: m
    real(c_float), intent(in) :: x(:, :), t(:)
    double precision :: loss
    real(c_float), allocatable :: z(:, :), delta(:, :)
    integer :: l, s, L_last
    L_last = m%n_linear
    m%layers(1)%a = x
    do l = 1, L_last
      z = matmul(m%layers(l)%a, m%layers(l)%w)
      do s = 1, m%batch
        z(s, :) = z(s, :) + m%layers(l)%b
      end do
      if (l < L_last) m%layers(l + 1)%a = tanh(z)
    end do
    ! z is now the output (batch, 1)
    loss = sum((dble(z(:, 1)) - dble(t))**2) / m%batch
    allocate (delta(m%batch, 1))
    delta(:, 1) = real(2d0 * (dble(z(:, 1)) - dble(t)) / m%batch, c_float)
    do l = L_last, 1, -1
      m%layers(l)%gw = matmul(transpose(m%layers(l)%a), delta)
      m%layers(l)%gb = sum(delta, dim=1)
      if (l == 1) exit
      delta = matmul(delta, transpose(m%layers(l)%w)) * (1 - m%layers(l)%a**2)
    end do
  end function mlp_train_batch

end module mlp_model
