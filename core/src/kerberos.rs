//! NEX Kerberos. (Filled in by the Kerberos issue.)
