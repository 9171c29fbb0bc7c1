! fortran_basic.f90 - libdlpackshim from Fortran 2003 (ISO_C_BINDING), written
! from dlpackshim.h and docs/other-languages.md alone.
!
! A Fortran array is column-major: it is described as it is (shape in Fortran's
! order, strides in elements with the first axis fastest), validated, asked for
! its layout, and copied to C order by dlpackshim_copy. Then a managed tensor is
! made over memory the library reference-counts (dlpackshim_block_*), so that
! its release needs no callback into Fortran. Unsigned C fields are passed as
! the signed kind of the same width (every value used is below 128). Every
! fallible function returns an integer(c_int) status (0 or a negative
! dlpackshim_status) and its results through intent(out) arguments.
!
! Build (examples/run-fortran.sh does this in make check):
!   gfortran fortran_basic.f90 -L<libdir> -ldlpackshim -o fortran_basic
module dlpackshim
  use, intrinsic :: iso_c_binding
  implicit none

  ! Enum values from dlpackshim.h: fixed forever.
  integer(c_int32_t), parameter :: kDLCPU = 1
  integer(c_int8_t), parameter :: kDLFloat = 2
  integer(c_int32_t), parameter :: LAYOUT_C = 1, LAYOUT_F = 2
  integer(c_int), parameter :: DLPACKSHIM_ERR_INVALID_TENSOR = -3
  integer(c_int64_t), parameter :: DLPACKSHIM_STREAM_NONE = -1  ! host memory: no stream

  type, bind(c) :: DLDevice
    integer(c_int32_t) :: device_type
    integer(c_int32_t) :: device_id
  end type

  type, bind(c) :: DLDataType
    integer(c_int8_t) :: code   ! uint8_t in C
    integer(c_int8_t) :: bits   ! uint8_t
    integer(c_int16_t) :: lanes ! uint16_t
  end type

  type, bind(c) :: DLTensor
    type(c_ptr) :: data
    type(DLDevice) :: device
    integer(c_int32_t) :: ndim
    type(DLDataType) :: dtype
    type(c_ptr) :: shape        ! int64_t *
    type(c_ptr) :: strides      ! int64_t *, in elements
    integer(c_int64_t) :: byte_offset ! uint64_t
  end type

  type, bind(c) :: DLPackVersion
    integer(c_int32_t) :: major, minor ! uint32_t
  end type

  type, bind(c) :: DLManagedTensorVersioned
    type(DLPackVersion) :: version
    type(c_ptr) :: manager_ctx
    type(c_funptr) :: deleter
    integer(c_int64_t) :: flags ! uint64_t
    type(DLTensor) :: dl_tensor
  end type

  interface
    integer(c_int) function dlpackshim_tensor_validate(t, flags) bind(c)
      import :: DLTensor, c_int, c_int64_t
      type(DLTensor), intent(in) :: t
      integer(c_int64_t), value :: flags
    end function
    integer(c_int) function dlpackshim_tensor_layout(t, layout) bind(c)
      import :: DLTensor, c_int, c_int32_t
      type(DLTensor), intent(in) :: t
      integer(c_int32_t), intent(out) :: layout
    end function
    integer(c_int) function dlpackshim_compact_strides(ndim, shape, order, strides) bind(c)
      import :: c_int, c_int32_t, c_int64_t
      integer(c_int32_t), value :: ndim, order
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int64_t), intent(out) :: strides(*)
    end function
    integer(c_int) function dlpackshim_copy(dst, src, stream) bind(c)
      import :: DLTensor, c_int, c_int64_t
      type(DLTensor), intent(in) :: dst, src
      integer(c_int64_t), value :: stream ! unused for host memory: pass 0
    end function
    type(c_ptr) function dlpackshim_last_error() bind(c)
      import :: c_ptr
    end function
    integer(c_int) function dlpackshim_block_alloc(nbytes, data) bind(c)
      import :: c_int, c_size_t, c_ptr
      integer(c_size_t), value :: nbytes
      type(c_ptr), intent(out) :: data
    end function
    integer(c_int) function dlpackshim_block_retain(data) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: data
    end function
    integer(c_int) function dlpackshim_block_refcount(data, count) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: data
      integer(c_int64_t), intent(out) :: count
    end function
    subroutine dlpackshim_block_release(data) bind(c)
      import :: c_ptr
      type(c_ptr), value :: data
    end subroutine
    integer(c_int) function dlpackshim_tensor_new(data, device_type, device_id, ndim, shape, &
        strides, code, bits, lanes, byte_offset, flags, owner, release, tensor_out) bind(c)
      import :: c_int, c_ptr, c_funptr, c_int8_t, c_int16_t, c_int32_t, c_int64_t
      type(c_ptr), value :: data, owner
      type(c_ptr), intent(out) :: tensor_out ! DLManagedTensorVersioned **
      integer(c_int32_t), value :: device_type, device_id, ndim
      integer(c_int64_t), intent(in) :: shape(*), strides(*)
      integer(c_int8_t), value :: code, bits
      integer(c_int16_t), value :: lanes
      integer(c_int64_t), value :: byte_offset, flags
      type(c_funptr), value :: release
    end function
    subroutine dlpackshim_tensor_free(t) bind(c)
      import :: c_ptr
      type(c_ptr), value :: t
    end subroutine
  end interface

contains

  ! The thread's last error message, as a Fortran string.
  function last_error() result(msg)
    character(len=:), allocatable :: msg
    character(kind=c_char), pointer :: chars(:)
    integer :: n
    call c_f_pointer(dlpackshim_last_error(), chars, [4096])
    n = 0
    do while (chars(n + 1) /= c_null_char)
      n = n + 1
    end do
    allocate(character(len=n) :: msg)
    msg = transfer(chars(1:n), msg)
  end function

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(a, a)', 'FAILED: ', what
      error stop 1
    end if
  end subroutine

  ! A DLTensor of float32 on the CPU viewing data, with the given shape and strides.
  function float_tensor(data, shape, strides) result(t)
    type(c_ptr), intent(in) :: data
    integer(c_int64_t), target, intent(in) :: shape(:), strides(:)
    type(DLTensor) :: t
    t%data = data
    t%device = DLDevice(kDLCPU, 0)
    t%ndim = size(shape)
    t%dtype = DLDataType(kDLFloat, 32_c_int8_t, 1_c_int16_t)
    t%shape = c_loc(shape)
    t%strides = c_loc(strides)
    t%byte_offset = 0
  end function
end module

program fortran_basic
  use dlpackshim
  implicit none
  integer, parameter :: m = 3, n = 4
  real(c_float), target :: a(m, n), c_order(n * m)
  real(c_float), pointer :: block(:, :)
  integer(c_int64_t), target :: shape(2) = [int(m, c_int64_t), int(n, c_int64_t)]
  integer(c_int64_t), target :: f_strides(2), c_strides(2), bad_shape(2) = [3_c_int64_t, -1_c_int64_t]
  type(DLTensor) :: src, dst, bad
  type(DLManagedTensorVersioned), pointer :: managed
  type(c_ptr) :: mem, t
  integer(c_int32_t) :: layout
  integer(c_int64_t) :: refs
  integer :: i, j

  do j = 1, n
    do i = 1, m
      a(i, j) = real(10 * i + j, c_float)
    end do
  end do

  ! 1. Describe the column-major array as it is: strides (1, m).
  call check(dlpackshim_compact_strides(2, shape, LAYOUT_F, f_strides) == 0, 'compact_strides F')
  call check(all(f_strides == [1_c_int64_t, int(m, c_int64_t)]), 'F strides are (1, m)')
  src = float_tensor(c_loc(a), shape, f_strides)
  call check(dlpackshim_tensor_validate(src, 0_c_int64_t) == 0, 'validate: '//last_error())
  call check(dlpackshim_tensor_layout(src, layout) == 0, 'tensor_layout')
  call check(layout == LAYOUT_F, 'the Fortran array is F-contiguous, not C')
  print '(a, 2i3, a, 2i3, a, i2)', 'Fortran array: shape', shape, ', strides', f_strides, &
      ', layout', layout

  ! 2. Copy it to C order: same shape, row-major strides (n, 1).
  call check(dlpackshim_compact_strides(2, shape, LAYOUT_C, c_strides) == 0, 'compact_strides C')
  dst = float_tensor(c_loc(c_order), shape, c_strides)
  call check(dlpackshim_copy(dst, src, DLPACKSHIM_STREAM_NONE) == 0, 'copy: '//last_error())
  do i = 1, m
    do j = 1, n
      call check(c_order((i - 1) * n + j) == a(i, j), 'C-order copy holds a(i, j) at i*n + j')
    end do
  end do
  print '(a, 12f5.0)', 'C order:', c_order

  ! 3. A bad tensor: the message names the field and the value.
  bad = float_tensor(c_loc(a), bad_shape, f_strides)
  call check(dlpackshim_tensor_validate(bad, 0_c_int64_t) == DLPACKSHIM_ERR_INVALID_TENSOR, &
      'a negative extent is refused')
  call check(index(last_error(), 'shape[1] is -1') > 0, 'the error names shape[1]')
  print '(a, a)', 'refused as expected: ', last_error()

  ! 4. A managed tensor over reference-counted memory: its release is
  !    dlpackshim_block_release, which needs no callback into Fortran and may
  !    run on any thread (a consumer's).
  call check(dlpackshim_block_alloc(int(m * n * 4, c_size_t), mem) == 0, 'block_alloc')
  call c_f_pointer(mem, block, [m, n])
  block = a
  call check(dlpackshim_block_retain(mem) == 0, 'block_retain') ! the tensor's reference
  call check(dlpackshim_tensor_new(mem, kDLCPU, 0, 2, shape, f_strides, kDLFloat, 32_c_int8_t, &
      1_c_int16_t, 0_c_int64_t, 0_c_int64_t, mem, c_funloc(dlpackshim_block_release), t) == 0, &
      'tensor_new: '//last_error())
  call check(c_associated(t), 'tensor_new gave a tensor')
  call c_f_pointer(t, managed)
  call check(managed%version%major == 1 .and. managed%version%minor == 3, 'version 1.3')
  call check(dlpackshim_tensor_layout(managed%dl_tensor, layout) == 0 .and. layout == LAYOUT_F, &
      'the managed tensor keeps the F strides')
  call dlpackshim_block_release(mem) ! ours: the tensor still holds the memory
  call check(dlpackshim_block_refcount(mem, refs) == 0 .and. refs == 1, 'one reference left')
  call check(block(m, n) == a(m, n), 'the block is still alive')
  call dlpackshim_tensor_free(t) ! its deleter drops the last reference
  print '(a)', 'fortran_basic: ok'
end program
