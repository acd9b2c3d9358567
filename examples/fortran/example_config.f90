! Reads the example's hyper-parameters: the shared config file
! (examples/surrogate.cfg, "key = value", "#" comments; every key required),
! then --key=value (or --key value) options on the command line, which win.
! --config=FILE names the file (default surrogate.cfg).
module example_config
  implicit none
  private

  type, public :: surrogate_config
    integer :: nx, horizon, episode, stencil, hidden, layers, batch, steps, seed, log_every
    integer :: checkpoint_every, restart
    double precision :: viscosity, target_scale, muon_lr, adam_lr, lr_final, weight_decay, max_grad_norm
    character(len=16) :: optimizer
    character(len=32) :: backend
    character(len=1024) :: loss_csv, checkpoint_dir
  end type surrogate_config

  character(len=*), parameter :: keys(23) = [character(len=16) :: "nx", "viscosity", "horizon", "episode", "target_scale", &
    "stencil", "hidden", "layers", "batch", "optimizer", "muon_lr", "adam_lr", "lr_final", "weight_decay", "max_grad_norm", &
    "backend", "steps", "seed", "log_every", "loss_csv", "checkpoint_every", "checkpoint_dir", "restart"]

  public :: read_config

contains

  !> Fills cfg; on failure returns a message in `error` (else "").
  subroutine read_config(cfg, error)
    type(surrogate_config), intent(out) :: cfg
    character(len=*), intent(out) :: error
    logical :: from_file(size(keys)), from_cli(size(keys))
    character(len=1024) :: path, arg, key, value
    character(len=2048) :: line
    integer :: unit, ios, i, eq, n
    error = ""
    from_file = .false.
    from_cli = .false.
    path = "surrogate.cfg"
    ! The command line first, remembered, so that it overrides the file.
    n = command_argument_count()
    i = 1
    do while (i <= n)
      call get_command_argument(i, arg)
      if (arg(1:2) /= "--") then
        error = "unexpected argument "//trim(arg)
        return
      end if
      eq = index(arg, "=")
      if (eq > 0) then
        key = arg(3:eq - 1)
        value = arg(eq + 1:)
      else
        key = arg(3:)
        i = i + 1
        if (i > n) then
          error = "--"//trim(key)//" needs a value"
          return
        end if
        call get_command_argument(i, value)
      end if
      if (key == "config") then
        path = value
      else
        call set_key(cfg, key, value, from_cli, error)
        if (error /= "") return
      end if
      i = i + 1
    end do

    open (newunit=unit, file=path, status="old", action="read", iostat=ios)
    if (ios /= 0) then
      error = "cannot read config file "//trim(path)
      return
    end if
    do
      read (unit, '(a)', iostat=ios) line
      if (ios /= 0) exit
      if (index(line, "#") > 0) line = line(1:index(line, "#") - 1)
      if (len_trim(line) == 0) cycle
      eq = index(line, "=")
      if (eq == 0) then
        error = trim(path)//": not a key = value line: "//trim(line)
        exit
      end if
      key = adjustl(line(1:eq - 1))
      value = adjustl(line(eq + 1:))
      i = findloc(keys, trim(key), dim=1)
      if (i > 0) then
        if (from_cli(i)) cycle
      end if
      call set_key(cfg, key, value, from_file, error)
      if (error /= "") exit
    end do
    close (unit)
    if (error /= "") return
    do i = 1, size(keys)
      if (.not. (from_file(i) .or. from_cli(i))) then
        error = "key "//trim(keys(i))//" is missing from "//trim(path)
        return
      end if
    end do
  end subroutine read_config

  subroutine set_key(cfg, key, value, seen, error)
    type(surrogate_config), intent(inout) :: cfg
    character(len=*), intent(in) :: key, value
    logical, intent(inout) :: seen(:)
    character(len=*), intent(inout) :: error
    integer :: i, ios
    i = findloc(keys, trim(key), dim=1)
    if (i == 0) then
      error = "unknown key "//trim(key)
      return
    end if
    ios = 0
    select case (trim(key))
    case ("nx"); read (value, *, iostat=ios) cfg%nx
    case ("viscosity"); read (value, *, iostat=ios) cfg%viscosity
    case ("horizon"); read (value, *, iostat=ios) cfg%horizon
    case ("episode"); read (value, *, iostat=ios) cfg%episode
    case ("target_scale"); read (value, *, iostat=ios) cfg%target_scale
    case ("stencil"); read (value, *, iostat=ios) cfg%stencil
    case ("hidden"); read (value, *, iostat=ios) cfg%hidden
    case ("layers"); read (value, *, iostat=ios) cfg%layers
    case ("batch"); read (value, *, iostat=ios) cfg%batch
    case ("optimizer"); cfg%optimizer = value
    case ("muon_lr"); read (value, *, iostat=ios) cfg%muon_lr
    case ("adam_lr"); read (value, *, iostat=ios) cfg%adam_lr
    case ("lr_final"); read (value, *, iostat=ios) cfg%lr_final
    case ("weight_decay"); read (value, *, iostat=ios) cfg%weight_decay
    case ("max_grad_norm"); read (value, *, iostat=ios) cfg%max_grad_norm
    case ("backend"); cfg%backend = value
    case ("steps"); read (value, *, iostat=ios) cfg%steps
    case ("seed"); read (value, *, iostat=ios) cfg%seed
    case ("log_every"); read (value, *, iostat=ios) cfg%log_every
    case ("loss_csv"); cfg%loss_csv = value
    case ("checkpoint_every"); read (value, *, iostat=ios) cfg%checkpoint_every
    case ("checkpoint_dir"); cfg%checkpoint_dir = value
    case ("restart"); read (value, *, iostat=ios) cfg%restart
    end select
    if (ios /= 0) then
      error = "bad value for "//trim(key)//": "//trim(value)
      return
    end if
    seen(i) = .true.
  end subroutine set_key

end module example_config
