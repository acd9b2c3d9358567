! Assertions for the Fortran tests: failures are counted and reported with
! the rank; ftest_finish agrees across ranks and stops with status 1 when any
! rank failed. The tests are built twice, with `use mpi` and with
! `use mpi_f08` (DMUON_TEST_MPI_F08); this helper only needs MPI_COMM_WORLD.
module ftest
  use mpi, only: MPI_COMM_WORLD, MPI_INTEGER, MPI_SUM, MPI_Comm_rank, MPI_Allreduce
  implicit none
  private
  public :: expect, expect_status, ftest_finish
  integer, save :: failures = 0

contains

  subroutine expect(condition, what)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: what
    integer :: rank, ierr
    if (condition) return
    failures = failures + 1
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    write (*, '("FAIL on rank ",i0,": ",a)') rank, what
  end subroutine expect

  subroutine expect_status(got, want, what)
    integer, intent(in) :: got, want
    character(len=*), intent(in) :: what
    character(len=64) :: detail
    write (detail, '(" (status ",i0,", expected ",i0,")")') got, want
    call expect(got == want, what//trim(detail))
  end subroutine expect_status

  !> Collective: every rank learns whether any failed.
  subroutine ftest_finish(name)
    character(len=*), intent(in) :: name
    integer :: total, rank, ierr
    call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    if (rank == 0) write (*, '(a,": ",i0," failure(s)")') name, total
    if (total > 0) error stop 1
  end subroutine ftest_finish

end module ftest
