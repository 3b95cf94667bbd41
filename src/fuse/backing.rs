//! Backing files registered with the kernel for FUSE passthrough, held the way fuser's
//! passthrough example holds them: each open handle owns an `Arc<BackingId>`, each inode
//! keeps a `Weak` one, so the inode's handles share one registration (the kernel refuses a
//! second, different one) and dropping the last handle's `Arc` closes it in the kernel.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use fuser::BackingId;
use parking_lot::Mutex;

#[derive(Default)]
pub(super) struct Backings(Mutex<Tables>);

#[derive(Default)]
struct Tables {
    /// Each passthrough handle: its inode and the backing it holds open.
    by_handle: HashMap<u64, (u64, Arc<BackingId>)>,
    /// The backing of each inode while one of its handles holds it.
    by_inode: HashMap<u64, Weak<BackingId>>,
}

impl Backings {
    /// The backing of `ino` for its new handle `fh`: the one its other handles hold, or else
    /// the one `register` makes.
    pub fn get_or<E>(
        &self,
        fh: u64,
        ino: u64,
        register: impl FnOnce() -> Result<BackingId, E>,
    ) -> Result<Arc<BackingId>, E> {
        let mut t = self.0.lock();
        let id = match t.by_inode.get(&ino).and_then(Weak::upgrade) {
            Some(id) => id,
            None => {
                let id = Arc::new(register()?);
                t.by_inode.insert(ino, Arc::downgrade(&id));
                id
            }
        };
        t.by_handle.insert(fh, (ino, id.clone()));
        Ok(id)
    }

    /// Handle `fh` is closed: when it held its inode's backing last, the backing goes.
    pub fn put(&self, fh: u64) {
        let mut t = self.0.lock();
        if let Some((ino, id)) = t.by_handle.remove(&fh) {
            if Arc::into_inner(id).is_some() {
                t.by_inode.remove(&ino);
            }
        }
    }
}
