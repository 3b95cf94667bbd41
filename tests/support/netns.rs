//! Network namespaces standing in for hosts: a [`Lab`] is a bridge in this (root) namespace and
//! one network namespace per host, each joined to the bridge by a veth pair, in a private
//! `/24` of its own (`10.213.{slot}.0/24`: the bridge is `.1`, host `i` is `.{10 + i}`).
//!
//! A slot is taken with an exclusive `flock` on `/tmp/vfs-t-slot-{slot}.lock`, so tests of
//! concurrent processes never share a subnet or a name; whatever a killed test left under its
//! slot (every name starts `vfs-t-{slot}-`) is deleted before the slot is used again, and
//! `.ci/run` sweeps every `vfs-t-` namespace and link. The lab deletes its namespaces and links
//! on drop, also when a test panics.

#![allow(dead_code)]

use std::fs::File;
use std::process::{Command, Stdio};

/// How many subnets the labs of concurrent tests can take.
const SLOTS: u32 = 200;

pub struct Lab {
    slot: u32,
    hosts: usize,
    _slot_lock: nix::fcntl::Flock<File>,
}

/// Run `ip ARGS`; panics with its stderr when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ip ARGS`, failure ignored (deleting what may not exist).
fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Lab {
    /// A bridge and `hosts` namespaces joined to it (at most 26: hosts are named a, b, …).
    pub fn new(hosts: usize) -> Lab {
        assert!((1..=26).contains(&hosts));
        let (slot, lock) = (0..SLOTS)
            .find_map(|slot| {
                let f = File::create(format!("/tmp/vfs-t-slot-{slot}.lock")).ok()?;
                nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
                    .ok()
                    .map(|l| (slot, l))
            })
            .expect("a free network slot (/tmp/vfs-t-slot-*.lock)");
        let lab = Lab {
            slot,
            hosts,
            _slot_lock: lock,
        };
        lab.delete();
        let br = lab.bridge();
        ip(&["link", "add", &br, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", lab.server_addr()),
            "dev",
            &br,
        ]);
        ip(&["link", "set", &br, "up"]);
        for i in 0..hosts {
            let ns = lab.netns(i);
            let (outer, inner) = (lab.link(i, 0), lab.link(i, 1));
            ip(&["netns", "add", &ns]);
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner, "netns", &ns,
            ]);
            ip(&["link", "set", &outer, "master", &br, "up"]);
            let addr = format!("{}/24", lab.host_addr(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &inner]);
            ip(&["-n", &ns, "link", "set", &inner, "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        lab
    }

    fn prefix(&self) -> String {
        format!("vfs-t-{}-", self.slot)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.prefix())
    }

    /// The veth ends of host `i`: 0 on the bridge, 1 in the host's namespace.
    fn link(&self, i: usize, end: u8) -> String {
        format!("{}{}{end}", self.prefix(), (b'a' + i as u8) as char)
    }

    /// The network namespace of host `i` (`ip netns` name, `/run/netns/NAME`).
    pub fn netns(&self, i: usize) -> String {
        format!("{}{}", self.prefix(), (b'a' + i as u8) as char)
    }

    /// The bridge's address in this namespace: where a server every host reaches listens.
    pub fn server_addr(&self) -> String {
        format!("10.213.{}.1", self.slot)
    }

    /// The subnet of the lab (for a server's client rules).
    pub fn subnet(&self) -> String {
        format!("10.213.{}.0/24", self.slot)
    }

    /// Host `i`'s address in its namespace.
    pub fn host_addr(&self, i: usize) -> String {
        format!("10.213.{}.{}", self.slot, 10 + i)
    }

    /// `nsenter --net=/run/netns/NS PROGRAM`: the program runs in host `i`'s network
    /// namespace but this mount namespace (`ip netns exec` would make a new one, hiding a
    /// FUSE mount the program makes).
    pub fn nsenter(&self, i: usize, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.netns(i)))
            .arg("--")
            .arg(program);
        c
    }

    /// Delete every namespace and link of this slot (a veth goes with its namespace).
    fn delete(&self) {
        for i in 0..26 {
            ip_quiet(&["netns", "del", &self.netns(i)]);
            ip_quiet(&["link", "del", &self.link(i, 0)]);
        }
        ip_quiet(&["link", "del", &self.bridge()]);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.delete();
    }
}
