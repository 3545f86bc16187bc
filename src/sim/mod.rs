//! A deterministic simulator of the read policies on modelled devices (`make sim`).
