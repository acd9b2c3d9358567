! 1-D viscous Burgers, the same solver as examples/c/burgers.c (Rusanov flux,
! central diffusion, forward Euler, periodic), the grid split into blocks
! over the ranks with halos exchanged around the ring.
module burgers_sim
  use mpi_f08
  implicit none
  private

  double precision, parameter :: two_pi = 6.283185307179586d0

  type, public :: burgers
    type(MPI_Comm) :: comm
    integer :: left, right, n_local, offset, halo
    double precision :: dx, dt, nu
    double precision, allocatable :: u(:), next(:)  ! (1-halo : n_local+halo)
  end type burgers

  public :: burgers_init, burgers_set_initial, burgers_exchange, burgers_advance, rng_seed, rng_uniform

contains

  ! Park-Miller generator, exact in 64-bit integers: the C example's streams.
  integer(8) function rng_seed(a, b, c)
    integer, intent(in) :: a, b, c
    integer :: i
    rng_seed = mod(int(a, 8) * 1000003_8 + int(b, 8) * 7919_8 + int(c, 8) * 104729_8, 2147483646_8) + 1
    do i = 1, 3
      rng_seed = mod(rng_seed * 16807_8, 2147483647_8)
    end do
  end function rng_seed

  double precision function rng_uniform(s)
    integer(8), intent(inout) :: s
    s = mod(s * 16807_8, 2147483647_8)
    rng_uniform = dble(s) / 2147483647d0
  end function rng_uniform

  !> ok = .false. when a rank would hold fewer than halo points.
  subroutine burgers_init(b, comm, nx, nu, halo, ok)
    type(burgers), intent(out) :: b
    type(MPI_Comm), intent(in) :: comm
    integer, intent(in) :: nx, halo
    double precision, intent(in) :: nu
    logical, intent(out) :: ok
    integer :: rank, size
    call MPI_Comm_rank(comm, rank)
    call MPI_Comm_size(comm, size)
    b%comm = comm
    b%left = mod(rank + size - 1, size)
    b%right = mod(rank + 1, size)
    b%n_local = nx / size
    if (rank < mod(nx, size)) b%n_local = b%n_local + 1
    b%offset = rank * (nx / size) + min(rank, mod(nx, size))
    b%halo = halo
    ok = halo >= 1 .and. nx / size >= halo
    b%dx = two_pi / nx
    b%nu = nu
    ! |u| stays below its initial maximum (< 1.25): a fixed stable step.
    b%dt = min(0.16d0 * b%dx, 0.4d0 * b%dx * b%dx / max(nu, 1d-30))
    allocate (b%u(1 - halo:b%n_local + halo), b%next(1 - halo:b%n_local + halo))
    b%u = 0
    b%next = 0
  end subroutine burgers_init

  subroutine burgers_set_initial(b, seed, episode)
    type(burgers), intent(inout) :: b
    integer, intent(in) :: seed, episode
    double precision :: amp(4), phase(4), x
    integer(8) :: s
    integer :: i, k
    s = rng_seed(seed, 0, 1000 + episode)
    do k = 1, 4
      amp(k) = (rng_uniform(s) - 0.5d0) * 1.2d0 / k
      phase(k) = two_pi * rng_uniform(s)
    end do
    do i = 1, b%n_local
      x = (b%offset + i - 1) * b%dx
      b%u(i) = 0
      do k = 1, 4
        b%u(i) = b%u(i) + amp(k) * sin(k * x + phase(k))
      end do
    end do
  end subroutine burgers_set_initial

  subroutine burgers_exchange(b)
    type(burgers), intent(inout) :: b
    integer :: h, n
    h = b%halo
    n = b%n_local
    call MPI_Sendrecv(b%u(1:h), h, MPI_DOUBLE_PRECISION, b%left, 1, b%u(n + 1:n + h), h, MPI_DOUBLE_PRECISION, &
                      b%right, 1, b%comm, MPI_STATUS_IGNORE)
    call MPI_Sendrecv(b%u(n - h + 1:n), h, MPI_DOUBLE_PRECISION, b%right, 2, b%u(1 - h:0), h, &
                      MPI_DOUBLE_PRECISION, b%left, 2, b%comm, MPI_STATUS_IGNORE)
  end subroutine burgers_exchange

  pure double precision function flux(ul, ur)
    double precision, intent(in) :: ul, ur
    flux = 0.25d0 * (ul * ul + ur * ur) - 0.5d0 * max(abs(ul), abs(ur)) * (ur - ul)
  end function flux

  subroutine burgers_advance(b, nsteps)
    type(burgers), intent(inout) :: b
    integer, intent(in) :: nsteps
    double precision :: c, d
    integer :: s, i
    c = b%dt / b%dx
    d = b%nu * b%dt / (b%dx * b%dx)
    do s = 1, nsteps
      call burgers_exchange(b)
      do i = 1, b%n_local
        b%next(i) = b%u(i) - c * (flux(b%u(i), b%u(i + 1)) - flux(b%u(i - 1), b%u(i))) + &
                    d * (b%u(i + 1) - 2 * b%u(i) + b%u(i - 1))
      end do
      b%u(1:b%n_local) = b%next(1:b%n_local)
    end do
    call burgers_exchange(b)
  end subroutine burgers_advance

end module burgers_sim
