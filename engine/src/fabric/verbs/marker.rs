//! The provider's marker type, [`Verbs`], on the ground floor: the files above name it in
//! their trait implementations (`Device<Verbs>`, `ProtectionDomain<Verbs>`,
//! `QueuePair<Verbs>`, ...), and `mod.rs`, on top, implements `Provider` for it.

/// The verbs provider (libibverbs + librdmacm).
#[derive(Clone, Copy, Debug, Default)]
pub struct Verbs;
