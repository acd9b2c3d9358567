! A plain float64 reference of AdamW and Muon for the Fortran tests, written
! from the definitions (as tests/support/reference.cpp is for the C tests):
! AdamW as torch.optim.AdamW; Muon with momentum as an EMA, Nesterov, the
! quintic Newton-Schulz and the shape scale sqrt(max(1, rows/cols)) of the
! C matrix. A Fortran array u(n1, n2) is the C matrix [n2, n1].
module fref
  implicit none
  private
  public :: adamw_state, adamw_ref, muon_ref

  type :: adamw_state
    double precision, allocatable :: m(:), v(:)
    integer :: step = 0
  end type adamw_state

contains

  subroutine adamw_ref(p, g, s, lr, beta1, beta2, eps, wd)
    double precision, intent(inout) :: p(:)
    double precision, intent(in) :: g(:), lr, beta1, beta2, eps, wd
    type(adamw_state), intent(inout) :: s
    double precision :: bc1, bc2
    if (.not. allocated(s%m)) then
      allocate (s%m(size(p)), s%v(size(p)))
      s%m = 0
      s%v = 0
    end if
    s%step = s%step + 1
    bc1 = 1 - beta1**s%step
    bc2 = 1 - beta2**s%step
    p = p * (1 - lr * wd)
    s%m = beta1 * s%m + (1 - beta1) * g
    s%v = beta2 * s%v + (1 - beta2) * g * g
    p = p - lr / bc1 * s%m / (sqrt(s%v) / sqrt(bc2) + eps)
  end subroutine adamw_ref

  !> One Muon step of the Fortran array p(n1, n2) (C matrix [n2, n1]).
  subroutine muon_ref(p, g, momentum_buf, lr, momentum, wd)
    double precision, intent(inout) :: p(:, :), momentum_buf(:, :)
    double precision, intent(in) :: g(:, :), lr, momentum, wd
    double precision, allocatable :: u(:, :), x(:, :), a(:, :), b(:, :)
    double precision, parameter :: ca = 3.4445d0, cb = -4.7750d0, cc = 2.0315d0
    double precision :: c_rows, c_cols
    integer :: it
    momentum_buf = momentum * momentum_buf + (1 - momentum) * g
    u = (1 - momentum) * g + momentum * momentum_buf  ! Nesterov
    ! Orthogonalise the wide orientation (NS commutes with transposition).
    if (size(u, 1) <= size(u, 2)) then
      x = u
    else
      x = transpose(u)
    end if
    x = x / max(sqrt(sum(x * x)), 1d-7)
    do it = 1, 5
      a = matmul(x, transpose(x))
      b = cb * a + cc * matmul(a, a)
      x = ca * x + matmul(b, x)
    end do
    if (size(u, 1) <= size(u, 2)) then
      u = x
    else
      u = transpose(x)
    end if
    c_rows = size(p, 2)
    c_cols = size(p, 1)
    p = p * (1 - lr * wd) - lr * sqrt(max(1d0, c_rows / c_cols)) * u
  end subroutine muon_ref

end module fref
