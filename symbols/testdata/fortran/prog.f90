! Test program for the symbols package: Fortran modules, derived types,
! allocatable and assumed-shape arrays, CHARACTER, COMPLEX and LOGICAL.
! Lines carrying a STOP marker are where the differential tests stop the
! program under gdb; the expressions after the marker (separated by ';') are
! printed by gdb and by the package.
module geometry
  implicit none
  integer :: ncalls = 0
  real(8), parameter :: pi = 3.14159265358979d0
  type point
     real(8) :: x, y
  end type point
  type, extends(point) :: point3
     real(8) :: z
  end type point3
  type grid
     integer :: nx, ny
     real(8), allocatable :: cells(:,:)
     character(len=8) :: label
  end type grid
  real(8), allocatable :: shared(:)
contains
  function norm(p) result(r)
    type(point), intent(in) :: p
    real(8) :: r
    ncalls = ncalls + 1
    r = sqrt(p%x**2 + p%y**2)
    r = r + 0 ! STOP:norm ; p ; p%x ; r ; ncalls ; p%x * 2
  end function norm

  subroutine fill(a, n, scale, tag)
    integer, intent(in) :: n
    real(8), intent(inout) :: a(:)
    real(8), intent(in) :: scale
    character(len=*), intent(in) :: tag
    integer :: i
    do i = 1, n
       a(i) = i * scale
    end do
    ncalls = ncalls + len(tag) ! STOP:fill ; a ; a(2) ; n ; scale ; tag ; size(a) ; a(n) + 1
  end subroutine fill

  subroutine walk(m, offs)
    integer, intent(in) :: m(:,:)
    integer, intent(in) :: offs(0:)
    integer :: total
    total = sum(m) + sum(offs)
    ncalls = ncalls + total ! STOP:walk ; m ; m(2,3) ; offs ; offs(0) ; total
  end subroutine walk

  recursive function fact(n) result(f)
    integer, intent(in) :: n
    integer :: f
    if (n <= 1) then
       f = 1
       ncalls = ncalls + f ! STOP:fact ; n ; f
    else
       f = n * fact(n - 1)
    end if
  end function fact
end module geometry

program main
  use geometry
  implicit none
  type(point) :: p
  type(point3) :: p3
  type(grid) :: g
  real(8), allocatable :: v(:)
  real(8), allocatable :: never(:)
  integer :: fixed(3, 0:4)
  integer :: mat(2, 3)
  integer :: lb(-2:2)
  character(len=10) :: name
  character :: initial
  logical :: flag
  complex(8) :: z
  integer, target :: t
  integer, pointer :: ip
  integer :: i, j, k
  real(8) :: d
  p = point(3d0, 4d0)
  p3%x = 1; p3%y = 2; p3%z = 3
  allocate(v(4))
  v = 0
  allocate(shared(3))
  shared = [1.5d0, 2.5d0, 3.5d0]
  g%nx = 2
  g%ny = 2
  allocate(g%cells(2, 2))
  g%cells = reshape([1d0, 2d0, 3d0, 4d0], [2, 2])
  g%label = 'grid'
  do j = 0, 4
     do i = 1, 3
        fixed(i, j) = i * 10 + j
     end do
  end do
  mat = reshape([1, 2, 3, 4, 5, 6], [2, 3])
  lb = [(k * k, k = -2, 2)]
  name = 'fortran'
  initial = 'F'
  flag = .true.
  z = (1.5d0, -2d0)
  t = 42
  ip => t
  d = norm(p)
  call fill(v, 4, 0.5d0, name)
  call walk(mat, lb)
  k = fact(4)
  print *, d, k, v(1), fixed(1, 0), name, flag, z, ip, initial, p3%z, g%nx, shared(1)
  ncalls = ncalls + 1 ! STOP:main ; p ; p3 ; v ; fixed ; fixed(2,3) ; mat ; lb ; lb(-1) ; name ; name(1:4) ; flag ; z ; t ; ip ; d ; k ; ncalls ; shared ; g%label ; g%nx + g%ny ; p%x + p%y ; initial ; flag .and. k > 3 ; k / 5 ; v(2:3) ; never ; set t = 7 ; set v(2) = 4.5 ; set flag = .false. ; set p%x = -1
end program main
