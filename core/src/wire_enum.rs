//! One way to declare a wire enum whose registry may grow: `enum_with_unknown!` (the idiom of
//! smoltcp's macro of that name, written for wirekit) declares the enum with an `Unknown`
//! arm holding any code it does not name, so decoding a code never fails, and the
//! conversions both ways (`from_code`/`code`, as `const fn`s, and `From` in both directions).
//!
//! ```text
//! enum_with_unknown! {
//!     /// The v2 command.
//!     pub enum Command(u8) {
//!         /// A health check.
//!         Local = 0x0,
//!         /// A relayed connection.
//!         Proxy = 0x1,
//!     }
//! }
//! assert_eq!(Command::from_code(0x1), Command::Proxy);
//! assert_eq!(Command::from_code(0x7), Command::Unknown(0x7));
//! assert_eq!(u8::from(Command::Unknown(0x7)), 0x7);
//! ```
//!
//! `Unknown(c)` is meant for codes the enum does not name; `Unknown` of a named code compares
//! unequal to the named arm, so build values with `from_code` when the code comes off the wire.

/// See the [module docs](self).
macro_rules! enum_with_unknown {
    (
        $(#[$enum_attr:meta])*
        pub enum $name:ident($ty:ty) {
            $(
                $(#[$variant_attr:meta])*
                $variant:ident = $value:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$enum_attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub enum $name {
            $(
                $(#[$variant_attr])*
                $variant,
            )+
            /// A code this version does not name, kept as it was on the wire.
            Unknown($ty),
        }

        impl $name {
            /// The value for a wire code (an unnamed code is `Unknown`).
            #[inline]
            pub const fn from_code(code: $ty) -> Self {
                match code {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }

            /// The wire code.
            #[inline]
            pub const fn code(self) -> $ty {
                match self {
                    $( $name::$variant => $value, )+
                    $name::Unknown(code) => code,
                }
            }
        }

        impl From<$ty> for $name {
            #[inline]
            fn from(code: $ty) -> Self {
                Self::from_code(code)
            }
        }

        impl From<$name> for $ty {
            #[inline]
            fn from(value: $name) -> $ty {
                value.code()
            }
        }
    };
}

#[cfg(test)]
mod tests {
    enum_with_unknown! {
        /// A test registry.
        pub enum Sample(u8) {
            /// One.
            One = 1,
            /// Two hundred.
            Big = 0xC8,
        }
    }

    #[test]
    fn every_code_round_trips() {
        for code in 0..=u8::MAX {
            let v = Sample::from_code(code);
            assert_eq!(v.code(), code);
            assert_eq!(u8::from(v), code);
            assert_eq!(Sample::from(code), v);
            let named = matches!(v, Sample::One | Sample::Big);
            assert_eq!(named, code == 1 || code == 0xC8, "{code}");
        }
        assert_eq!(Sample::from_code(7), Sample::Unknown(7));
    }
}
