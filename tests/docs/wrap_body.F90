! Wrapper of a Fortran documentation fragment: the fragment becomes a BLOCK
! of this program, so it may declare (and use) what it likes; these names,
! the ones fragments use without declaring them, are hidden by its own.
program doc_fragment
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use dmuon
  implicit none
  type(dmuon_context) :: ctx
  type(dmuon_optimizer) :: opt
  integer :: ierr, rank, step, nsteps, w, b
  ierr = 0; rank = 0; step = 0; nsteps = 0; w = 0; b = 1
  if (ierr /= 0) then
    block
@SNIPPET@
    end block
  end if
end program doc_fragment
