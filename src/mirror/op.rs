//! The kinds of change a fan-out runs on the legs. Each has its own cost estimate in
//! [`OpCosts`](super::fanout::OpCosts) (a fast `write` must not make a slow truncate look
//! cheap), and a name: what the log says, and what an injected fault (`mirror/fault.rs`) and
//! the tests call it.

/// A kind of operation run on several legs at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Mknod,
    Mkdir,
    Symlink,
    Link,
    Unlink,
    Rmdir,
    Rename,
    Open,
    Write,
    Fsync,
    Fsyncdir,
    Fallocate,
    CopyFileRange,
    Setattr,
    DropSetuid,
    SetTimes,
    SetMtime,
    Setxattr,
    Removexattr,
    SetChecksumId,
    /// The rewrite of a copy that failed a read or its checksums.
    Repair,
}

impl Op {
    /// Every kind, in declaration order (`ALL[op as usize] == op`).
    pub const ALL: [Op; 22] = [
        Op::Create,
        Op::Mknod,
        Op::Mkdir,
        Op::Symlink,
        Op::Link,
        Op::Unlink,
        Op::Rmdir,
        Op::Rename,
        Op::Open,
        Op::Write,
        Op::Fsync,
        Op::Fsyncdir,
        Op::Fallocate,
        Op::CopyFileRange,
        Op::Setattr,
        Op::DropSetuid,
        Op::SetTimes,
        Op::SetMtime,
        Op::Setxattr,
        Op::Removexattr,
        Op::SetChecksumId,
        Op::Repair,
    ];

    /// Its name, as the log and the `fault` key's `op=` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Mknod => "mknod",
            Op::Mkdir => "mkdir",
            Op::Symlink => "symlink",
            Op::Link => "link",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Rename => "rename",
            Op::Open => "open",
            Op::Write => "write",
            Op::Fsync => "fsync",
            Op::Fsyncdir => "fsyncdir",
            Op::Fallocate => "fallocate",
            Op::CopyFileRange => "copy_file_range",
            Op::Setattr => "setattr",
            Op::DropSetuid => "drop setuid",
            Op::SetTimes => "set times",
            Op::SetMtime => "set mtime",
            Op::Setxattr => "setxattr",
            Op::Removexattr => "removexattr",
            Op::SetChecksumId => "set checksum id",
            Op::Repair => "repair",
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_kind_is_listed_once_in_order_with_a_name_of_its_own() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i, "{op:?}");
        }
        let names: HashSet<&str> = Op::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(names.len(), Op::ALL.len());
    }
}
