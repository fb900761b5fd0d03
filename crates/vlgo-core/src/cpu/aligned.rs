//! A growable f32 buffer that starts on a cache line.

use std::ops::{Deref, DerefMut};

/// One cache line of floats, and one AVX-512 vector.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// f32 scratch whose first entry sits on a 64-byte boundary, so that a kernel's full-width loads
/// of a row of 16 floats (n a multiple of 16) never straddle two cache lines: the 64 x 64
/// product on AVX-512 ran 1.03-1.1x faster on such buffers than on the 16-byte alignment the C
/// heap gives (`docs/expm.md`). Reads and writes as a `[f32]` of its length.
#[derive(Clone, Default)]
pub(crate) struct Aligned {
    lines: Vec<Line>,
    len: usize,
}

impl Aligned {
    /// Sets the length; entries past the old length are zero, those before it are kept.
    pub(crate) fn resize(&mut self, len: usize) {
        let lines = len.div_ceil(16);
        if len < self.len {
            // Entries beyond the new length, up to the old one, are zeroed now so that growing
            // again finds them zero.
            let old = self.len;
            self[..old][len..].fill(0.0);
        }
        self.lines.resize(lines, Line::default());
        self.len = len;
    }
}

impl Deref for Aligned {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        // SAFETY: a Line is 16 f32 with no padding (repr(C), size 64), so the lines hold
        // 16 x lines.len() >= len initialised floats, aligned for f32.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
}

impl DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as above, through the unique borrow of the lines.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_cache_line_and_keeps_its_entries_as_it_grows() {
        let mut b = Aligned::default();
        assert!(b.is_empty());
        b.resize(9);
        assert_eq!(b.len(), 9);
        assert_eq!(b.as_ptr() as usize % 64, 0);
        b.copy_from_slice(&[1.0; 9]);
        b.resize(40);
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert_eq!(&b[..9], &[1.0; 9]);
        assert!(b[9..].iter().all(|&x| x == 0.0));
        // Shrinking then growing: the dropped entries come back as zero, as with a Vec.
        b.resize(3);
        b.resize(12);
        assert_eq!(&b[..3], &[1.0; 3]);
        assert!(b[3..].iter().all(|&x| x == 0.0));
    }
}
