! Reads the example's hyper-parameters: the shared config file
! (examples/surrogate.cfg, "key = value", "#" comments; every key required),
! then --key=value (or --key value) options on the command line, which win.
! --config=FILE names the file (default surrogate.cfg); --help (-h) asks for
! the help, which shows the file's values and comments (print_help). Every
! value is checked (check_values) with a message naming the option.
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

  ! Each key's value as written (file or command line), for the messages.
  character(len=1024) :: raw_values(size(keys))

  public :: read_config, print_help

contains

  !> Fills cfg and checks it; on failure returns a message in `error` (else
  !> ""). With --help on the command line, returns help = .true. at once and
  !> `path` the config file to show.
  subroutine read_config(cfg, error, help, path)
    type(surrogate_config), intent(out) :: cfg
    character(len=*), intent(out) :: error, path
    logical, intent(out) :: help
    logical :: from_file(size(keys)), from_cli(size(keys))
    character(len=1024) :: arg, key, value
    character(len=2048) :: line
    integer :: unit, ios, i, eq, n
    error = ""
    help = .false.
    from_file = .false.
    from_cli = .false.
    path = "surrogate.cfg"
    ! The command line first, remembered, so that it overrides the file.
    n = command_argument_count()
    do i = 1, n
      call get_command_argument(i, arg)
      if (arg == "--help" .or. arg == "-h") help = .true.
      if (arg(1:9) == "--config=") path = arg(10:)
      if (arg == "--config" .and. i < n) call get_command_argument(i + 1, path)
    end do
    if (help) return
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
    call check_values(cfg, error)
  end subroutine read_config

  !> The rules, the same as the C example's (check_values in
  !> examples/c/driver.cpp), in the same order. NaN fails every comparison.
  subroutine check_values(c, error)
    use, intrinsic :: ieee_arithmetic, only: ieee_is_finite, ieee_is_nan
    type(surrogate_config), intent(in) :: c
    character(len=*), intent(out) :: error
    integer, parameter :: max_layers = 15  ! MLP_MAX_LINEAR - 1 of the C model
    error = ""
    call require(c%nx >= 1, "nx", ">= 1")
    call require(c%viscosity >= 0 .and. ieee_is_finite(c%viscosity), "viscosity", ">= 0")
    call require(c%horizon >= 1, "horizon", ">= 1")
    call require(c%episode >= 1, "episode", ">= 1")
    call require(c%target_scale > 0 .and. ieee_is_finite(c%target_scale), "target_scale", "> 0")
    call require(c%stencil >= 0, "stencil", ">= 0")
    call require(c%hidden >= 1, "hidden", ">= 1")
    call require(c%layers >= 1 .and. c%layers <= max_layers, "layers", "between 1 and 15")
    call require(c%batch >= 1, "batch", ">= 1")
    call require(c%optimizer == "muon" .or. c%optimizer == "adam", "optimizer", "muon or adam")
    call require(c%muon_lr > 0 .and. ieee_is_finite(c%muon_lr), "muon_lr", "> 0")
    call require(c%adam_lr > 0 .and. ieee_is_finite(c%adam_lr), "adam_lr", "> 0")
    call require(c%lr_final >= 0 .and. c%lr_final <= 1, "lr_final", "between 0 and 1")
    call require(c%weight_decay >= 0 .and. ieee_is_finite(c%weight_decay), "weight_decay", ">= 0")
    call require(.not. ieee_is_nan(c%max_grad_norm), "max_grad_norm", "a number")
    call require(c%steps >= 1, "steps", ">= 1")
    call require(c%log_every >= 1, "log_every", ">= 1")
    call require(c%restart == 0 .or. c%restart == 1, "restart", "0 or 1")
    call require(len_trim(c%backend) > 0, "backend", "given")
    call require(len_trim(c%loss_csv) > 0, "loss_csv", "given")
    call require(len_trim(c%checkpoint_dir) > 0, "checkpoint_dir", "given")
  contains
    ! The first broken rule wins.
    subroutine require(ok, key, rule)
      logical, intent(in) :: ok
      character(len=*), intent(in) :: key, rule
      if (ok .or. error /= "") return
      error = "--"//key//"="//trim(raw_values(findloc(keys, key, dim=1)))//": must be "//rule
    end subroutine require
  end subroutine check_values

  !> --help: the options with their values in the config file (the defaults)
  !> and the file's comment on each, which is where they are explained.
  subroutine print_help(path)
    character(len=*), intent(in) :: path
    character(len=2048) :: line
    character(len=28) :: option
    integer :: unit, ios, eq, hash
    write (*, '(a)') "burgers_surrogate_f: online training of a Burgers surrogate with dmuon", "", &
      "usage: mpiexec -n RANKS burgers_surrogate_f [--config=FILE] [--key=value ...]", "", &
      "  -h, --help        this help", &
      "  --config=FILE     the config file, `key = value` lines (default surrogate.cfg)", "", &
      "Every key of the config file is an option too; the command line wins.", &
      "Exit status: 0 done, 75 checkpointed on a signal (run again to continue),", &
      "2 a bad option, 1 a failure.", ""
    open (newunit=unit, file=path, status="old", action="read", iostat=ios)
    if (ios /= 0) then
      write (*, '(a)') "(config file "//trim(path)//" not found: no defaults to show)"
      return
    end if
    write (*, '(a)') "keys, with their values in "//trim(path)//":"
    do
      read (unit, '(a)', iostat=ios) line
      if (ios /= 0) exit
      eq = index(line, "=")
      hash = index(line, "#")
      if (eq == 0 .or. (hash > 0 .and. hash < eq)) cycle
      if (hash == 0) hash = len_trim(line) + 1
      option = "--"//trim(adjustl(line(1:eq - 1)))//"="//trim(adjustl(line(eq + 1:hash - 1)))
      write (*, '(2x,a,1x,a)') option, trim(adjustl(line(hash + 1:)))
    end do
    close (unit)
  end subroutine print_help

  subroutine set_key(cfg, key, value, seen, error)
    type(surrogate_config), intent(inout) :: cfg
    character(len=*), intent(in) :: key, value
    logical, intent(inout) :: seen(:)
    character(len=*), intent(inout) :: error
    integer :: i, ios
    i = findloc(keys, trim(key), dim=1)
    if (i == 0) then
      error = "unknown option --"//trim(key)
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
      error = "--"//trim(key)//"="//trim(value)//": not a number"
      return
    end if
    raw_values(i) = value
    seen(i) = .true.
  end subroutine set_key

end module example_config
