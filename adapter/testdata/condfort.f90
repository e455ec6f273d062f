! A Fortran loop for breakpoint conditions in Fortran syntax: probe is called 12 times.
module counting
  implicit none
  integer :: total = 0
contains
  subroutine probe(i)
    integer, intent(in) :: i
    total = total + i ! MARK:f-probe
  end subroutine probe
end module counting

program condfort
  use counting
  implicit none
  integer :: i
  do i = 1, 12
    call probe(i)
  end do
  print '(a,i0)', 'total ', total
end program condfort
