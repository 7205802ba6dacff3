//! The random bits the sampler reads: a stream of words from the generator, read most
//! significant bit first, and the exact uniform and Bernoulli draws made from it.

use rand::Rng;

/// Words drawn from the generator at a time by [`Bits`].
pub(super) const WORDS: usize = 32;

/// Random bits from `rng`, drawn `64·WORDS` at a time, consumed one or more at a time.
pub(in crate::privacy::noise) struct Bits<'a, R: Rng + ?Sized> {
    rng: &'a mut R,
    /// The stream: `words[0]`, `words[1]`, ..., each from its most significant bit.
    words: [u64; WORDS + 1],
    /// The next bit's position in the stream; at most `64·(WORDS + 1)`.
    pub(super) pos: usize,
}

impl<'a, R: Rng + ?Sized> Bits<'a, R> {
    pub(in crate::privacy::noise) fn new(rng: &'a mut R) -> Self {
        Self {
            rng,
            words: [0; WORDS + 1],
            pos: 64 * (WORDS + 1),
        }
    }

    /// The next 64 bits, the first drawn as the most significant, without consuming them.
    #[inline]
    pub(super) fn peek64(&mut self) -> u64 {
        if self.pos >= 64 * WORDS {
            self.refill();
        }
        let (i, offset) = (self.pos / 64, (self.pos % 64) as u32);
        // The last 64 - offset bits of words[i], then the first offset bits of words[i + 1].
        (self.words[i] << offset) | ((self.words[i + 1] >> 1) >> (63 - offset))
    }

    /// Keeps the unread bits of the last word, draws the others: `8·WORDS` bytes at once, each
    /// word from 8 of them, little-endian (as `next_u64` makes a word of a stream's bytes).
    #[cold]
    #[inline(never)]
    fn refill(&mut self) {
        self.words[0] = self.words[WORDS];
        let mut bytes = [0u8; 8 * WORDS];
        self.rng.fill_bytes(&mut bytes);
        for (w, b) in self.words[1..].iter_mut().zip(bytes.as_chunks::<8>().0) {
            *w = u64::from_le_bytes(*b);
        }
        self.pos -= 64 * WORDS;
    }

    /// Skips to the next word boundary of the stream (nothing if at one): the bits skipped are
    /// never read.
    #[inline]
    pub(super) fn align(&mut self) {
        self.pos = self.pos.next_multiple_of(64);
    }

    /// Consumes `n ≤ 64` bits, after [`peek64`](Self::peek64).
    #[inline]
    pub(super) fn skip(&mut self, n: u32) {
        debug_assert!(n <= 64);
        self.pos += n as usize;
    }

    /// `1 ≤ n ≤ 64` uniform bits.
    #[inline]
    pub(super) fn take(&mut self, n: u32) -> u64 {
        debug_assert!((1..=64).contains(&n));
        let v = self.peek64() >> (64 - n);
        self.skip(n);
        v
    }

    /// A fair bit.
    #[inline]
    pub(super) fn bit(&mut self) -> bool {
        self.take(1) == 1
    }

    /// Uniform in `[0, n)`, `n ≥ 1`, from `b ≤ 64` bits, `2^b ≥ n`: Lemire's multiply-and-
    /// reject, `(x·n) >> b` for a uniform `x < 2^b`, redrawn when the low `b` bits of `x·n` are
    /// below `2^b mod n`. Here `x·2^(64-b)` (the next 64 bits, the last `64 - b` cleared) is
    /// multiplied: the answer is the high word, and `threshold = (2^b mod n)·2^(64-b)`. `b = 0`
    /// is `n = 1`.
    #[inline]
    pub(super) fn uniform(&mut self, n: u64, b: u32, threshold: u64) -> u64 {
        if b == 0 {
            return 0;
        }
        // The top `b` bits (`b = 64`: all of them; `u64::MAX >> 64` would not be defined).
        let mask = u64::MAX.checked_shr(b).map_or(u64::MAX, |low| !low);
        loop {
            let x = self.peek64() & mask;
            self.skip(b);
            if let Some(v) = lemire(x, n, threshold) {
                return v;
            }
        }
    }

    /// `Bernoulli(num/den)`, `num ≤ den`, `den ≥ 1`: `U < num/den` for a uniform `U ∈ [0, 1)`
    /// whose bits are drawn 16 at a time. With `U ∈ [v, v + 1)·2^-16` the answer is known unless
    /// `num·2^16` lies strictly between `v·den` and `(v + 1)·den` (one `v` in `2^16`); then
    /// `U = (v + V)·2^-16` and the question becomes `V < (num·2^16 - v·den)/den`.
    #[inline]
    pub(super) fn bernoulli(&mut self, num: u64, den: u64) -> bool {
        debug_assert!(den >= 1 && num <= den);
        if num >= den {
            return true;
        }
        let den = den as u128;
        let mut num = num as u128;
        loop {
            match bernoulli_block(self.take(16) as u128, num, den) {
                Ok(answer) => return answer,
                Err(rest) => num = rest,
            }
        }
    }

    /// `Bernoulli(num/(den·k))`, `num ≤ den`, `k ≥ 1` (as `Bernoulli(num/den) ∧
    /// Bernoulli(1/k)` when `den·k` does not fit).
    #[inline]
    pub(super) fn bernoulli_over(&mut self, num: u64, den: u64, k: u64) -> bool {
        match den.checked_mul(k) {
            Some(dk) => self.bernoulli(num, dk),
            None => self.bernoulli(num, den) && self.bernoulli(1, k),
        }
    }

    /// CKS Algorithm 1's loop, the one home of every `Bernoulli(exp(-γ))` here (`γ ∈ [0, 1]`):
    /// `K ← 1`; while `trial(K)` succeeds, `K ← K + 1`; true when the final `K` is odd.
    /// `trial(K)` must be an independent `Bernoulli(γ/K)`.
    #[inline(always)]
    pub(super) fn alternating_series(
        &mut self,
        mut trial: impl FnMut(&mut Self, u64) -> bool,
    ) -> bool {
        let mut k: u64 = 1;
        while trial(self, k) {
            k += 1;
        }
        k % 2 == 1
    }

    /// `Bernoulli(exp(-num/den))` for any `num` and `den ≥ 1`: `⌊num/den⌋` draws of
    /// `Bernoulli(exp(-1))`, then the series for the fraction.
    pub(super) fn bernoulli_exp(&mut self, num: u128, den: u64) -> bool {
        debug_assert!(den >= 1);
        let mut whole = num / den as u128;
        while whole > 0 {
            if !self.alternating_series(|bits, k| bits.bernoulli(1, k)) {
                return false;
            }
            whole -= 1;
        }
        let frac = (num % den as u128) as u64;
        self.alternating_series(|bits, k| bits.bernoulli_over(frac, den, k))
    }
}

/// One try of Lemire's method (see [`Bits::uniform`]): `x` the next bits as the top of a word,
/// the value when the low word of `x·n` is at least `threshold`, else `None` (redraw).
#[inline(always)]
pub(super) fn lemire(x: u64, n: u64, threshold: u64) -> Option<u64> {
    let m = x as u128 * n as u128;
    (m as u64 >= threshold).then_some((m >> 64) as u64)
}

/// One 16-bit block `v` of [`Bits::bernoulli`]'s uniform against `num/den`: the answer when
/// `[v, v + 1)·2^-16` lies on one side of `num/den`, else (one `v` in `2^16`) the numerator of
/// what is left to compare, `num·2^16 - v·den` (over the same `den`).
#[inline(always)]
pub(super) fn bernoulli_block(v: u128, num: u128, den: u128) -> Result<bool, u128> {
    let below = v * den;
    let target = num << 16;
    let less = below < target;
    if !less || below + den <= target {
        Ok(less)
    } else {
        Err(target - below)
    }
}
