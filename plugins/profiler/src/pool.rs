//! Preallocated event objects: a slice that never moves (its addresses are NCCL's handles) and a lock-free queue
//! of the free indices, so taking and giving back an object neither allocates nor locks.

use crossbeam_queue::ArrayQueue;

pub(crate) struct Pool<T> {
    slots: Box<[T]>,
    free: ArrayQueue<u32>,
}

impl<T> Pool<T> {
    /// `n` (at least one) objects, `make(i)` building the one at index `i`.
    pub(crate) fn new(n: usize, make: impl FnMut(u32) -> T) -> Self {
        let n = n.max(1);
        let slots: Box<[T]> = (0..n as u32).map(make).collect();
        let free = ArrayQueue::new(n);
        for i in 0..n as u32 {
            // Cannot fail: the queue holds exactly n.
            let _ = free.push(i);
        }
        Pool { slots, free }
    }

    /// A free object, or None when all are in use.
    pub(crate) fn take(&self) -> Option<&T> {
        self.free.pop().map(|i| &self.slots[i as usize])
    }

    /// Gives back the object at `index` (taken before, given back once).
    pub(crate) fn give(&self, index: u32) {
        let _ = self.free.push(index);
    }

    pub(crate) fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_come_back_and_run_out() {
        let p = Pool::new(2, |i| i * 10);
        let a = *p.take().unwrap();
        let b = *p.take().unwrap();
        assert_eq!((a, b), (0, 10));
        assert!(p.take().is_none(), "two objects, both out");
        assert_eq!(p.in_use(), 2);
        p.give(1);
        assert_eq!(p.take().copied(), Some(10));
    }
}
