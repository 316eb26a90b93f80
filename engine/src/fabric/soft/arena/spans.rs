//! The allocator of the data area's page-granular spans.

/// First-fit allocator of page-granular spans of the data area.
pub(super) struct SpanAlloc {
    pub(super) free: Vec<(u64, u64)>,
    /// Every byte from here on was never handed out: the memfd still reads as zero there,
    /// and its pages are not allocated until touched.
    pub(super) fresh_from: u64,
}

impl SpanAlloc {
    /// Takes `len` bytes: their offset, and how many of them, from the start, were handed
    /// out before (and may hold old bytes); the rest reads as zero.
    pub(super) fn alloc(&mut self, len: u64) -> Option<(u64, u64)> {
        let i = self.free.iter().position(|&(_, l)| l >= len)?;
        let (off, l) = self.free[i];
        if l == len {
            self.free.remove(i);
        } else {
            self.free[i] = (off + len, l - len);
        }
        let used = self.fresh_from.clamp(off, off + len) - off;
        self.fresh_from = self.fresh_from.max(off + len);
        Some((off, used))
    }

    pub(super) fn release(&mut self, off: u64, len: u64) {
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, len));
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}
