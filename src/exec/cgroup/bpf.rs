//! cgroup v2 device control: a `BPF_PROG_TYPE_CGROUP_DEVICE` program that
//! allows a fixed list of devices and denies the rest, loaded and attached
//! through the raw `bpf()` syscall (no libbpf or compiler needed), as runc
//! and Slurm do. An attached program is held by the cgroup, not by the
//! process that loaded it: it stays in force after the supervisor's
//! descriptor closes, and goes with the cgroup.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::group::DeviceRule;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;
/// `BPF_DEVCG_DEV_BLOCK` and `BPF_DEVCG_DEV_CHAR`.
const DEV_BLOCK: i32 = 1;
const DEV_CHAR: i32 = 2;

/// One eBPF instruction, as the kernel lays it out.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    /// dst in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

/// `dst = *(u32 *)(src + off)`
const fn load_u32(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x61, dst, src, off, 0)
}
/// `dst &= imm` (32-bit)
const fn and32(dst: u8, imm: i32) -> Insn {
    insn(0x54, dst, 0, 0, imm)
}
/// `if dst != imm goto pc + off`
const fn jump_ne(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x55, dst, 0, off, imm)
}
/// `dst = imm` (64-bit)
const fn mov(dst: u8, imm: i32) -> Insn {
    insn(0xb7, dst, 0, 0, imm)
}
const EXIT: Insn = insn(0x95, 0, 0, 0, 0);

/// The program: the context (`struct bpf_cgroup_dev_ctx`) holds
/// `access_type` (device type in the low 16 bits, access in the high 16),
/// `major` and `minor`. Each rule is a block that returns 1 (allow) when
/// type, major and (unless a wildcard) minor match; the end returns 0.
pub fn program(rules: &[DeviceRule]) -> Vec<Insn> {
    let mut p = vec![
        load_u32(2, 1, 0), // r2 = access_type
        and32(2, 0xffff),  // r2 = device type
        load_u32(4, 1, 4), // r4 = major
        load_u32(5, 1, 8), // r5 = minor
    ];
    for rule in rules {
        let kind = if rule.block { DEV_BLOCK } else { DEV_CHAR };
        // Jumps skip to the end of this rule's block.
        match rule.minor {
            Some(minor) => {
                p.push(jump_ne(2, kind, 4));
                p.push(jump_ne(4, rule.major as i32, 3));
                p.push(jump_ne(5, minor as i32, 2));
            }
            None => {
                p.push(jump_ne(2, kind, 3));
                p.push(jump_ne(4, rule.major as i32, 2));
            }
        }
        p.push(mov(0, 1));
        p.push(EXIT);
    }
    p.push(mov(0, 0));
    p.push(EXIT);
    p
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a properly laid out bpf_attr variant for `cmd`, and
    // its size is passed along; the kernel reads (and for loads writes the
    // log into a buffer we own) only within it.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Loads the program for `rules` and attaches it to the cgroup open at
/// `cgroup_dir`.
pub fn attach(cgroup_dir: &std::fs::File, rules: &[DeviceRule]) -> io::Result<()> {
    let code = program(rules);
    let license = c"GPL";
    let mut log = vec![0u8; 4096];
    let mut name = [0u8; 16];
    name[..11].copy_from_slice(b"ysched_devs");
    let mut load = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: code.len() as u32,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_CGROUP_DEVICE,
        ..ProgLoad::default()
    };
    let fd = bpf(BPF_PROG_LOAD, &mut load).map_err(|e| {
        let verifier = String::from_utf8_lossy(&log)
            .trim_end_matches('\0')
            .trim()
            .to_string();
        if verifier.is_empty() {
            io::Error::new(e.kind(), format!("cannot load the device program: {e}"))
        } else {
            io::Error::new(
                e.kind(),
                format!("cannot load the device program: {e}: {verifier}"),
            )
        }
    })?;
    // SAFETY: BPF_PROG_LOAD returned a new descriptor we now own.
    let prog = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut attach = ProgAttach {
        target_fd: cgroup_dir.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        replace_bpf_fd: 0,
    };
    bpf(BPF_PROG_ATTACH, &mut attach)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot attach the device program: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_is_a_block_that_allows_and_the_end_denies() {
        let rules = [
            DeviceRule {
                block: false,
                major: 1,
                minor: Some(3),
            },
            DeviceRule {
                block: false,
                major: 136,
                minor: None,
            },
        ];
        let p = program(&rules);
        assert_eq!(p.len(), 4 + 5 + 4 + 2);
        // The first rule: type, major, minor, allow.
        assert_eq!(p[4], jump_ne(2, DEV_CHAR, 4));
        assert_eq!(p[6], jump_ne(5, 3, 2));
        assert_eq!(p[7], mov(0, 1));
        // A wildcard minor has no minor test.
        assert_eq!(p[9], jump_ne(2, DEV_CHAR, 3));
        assert_eq!(p[10], jump_ne(4, 136, 2));
        assert_eq!(p[p.len() - 2], mov(0, 0));
        assert_eq!(p[p.len() - 1], EXIT);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
