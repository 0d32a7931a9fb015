//! The accounts file of the authentication server: usernames, PIDs and passwords, with every
//! account's key derived in one batch when the file is loaded (never per login).
//!
//! ```toml
//! # key_scheme = "kerberos"   # the default: 3DS / Wii U
//! [[account]]
//! username = "alice"
//! pid = 1000
//! password = "wonderland"
//! ```
//!
//! Passwords are not kept once the keys are derived.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use wirekit_core::kerberos::{DerivedKey, KeyRequest};

/// How an account's Kerberos key is derived from its PID and password.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum KeyScheme {
    /// 3DS and Wii U: MD5 of the password applied `65000 + pid % 1024` times
    /// ([`wirekit_core::kerberos::derive_kerberos_key`]), batched on the host's widest lanes
    /// by [`wirekit_accel::kerberos::derive_kerberos_keys`].
    #[default]
    Kerberos,
    /// Switch: MD5 of the password, then MD5 of that key and the little-endian u64 PID
    /// ([`wirekit_core::kerberos::derive_switch_key`]: two MD5 calls, nothing to batch).
    Switch,
}

impl KeyScheme {
    /// The name used in the file.
    pub const fn as_str(&self) -> &'static str {
        match self {
            KeyScheme::Kerberos => "kerberos",
            KeyScheme::Switch => "switch",
        }
    }
}

/// Why an accounts file was not loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccountsError {
    /// The file could not be read.
    Io {
        /// The kind of I/O error.
        kind: std::io::ErrorKind,
        /// Its description.
        message: String,
    },
    /// The file is not valid TOML or lacks a field.
    Syntax {
        /// 1-based line of the error, when known.
        line: Option<usize>,
        /// The parser's description.
        message: String,
    },
    /// Two accounts have the same username.
    DuplicateUsername(String),
    /// Two accounts have the same PID.
    DuplicatePid(u64),
    /// An account's username is empty.
    EmptyUsername,
    /// An account's password is empty.
    EmptyPassword(String),
    /// The file holds more than [`Accounts::MAX_ACCOUNTS`] accounts.
    TooManyAccounts(usize),
}

impl std::fmt::Display for AccountsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccountsError::Io { message, .. } => write!(f, "accounts file: {message}"),
            AccountsError::Syntax {
                line: Some(line),
                message,
            } => write!(f, "accounts file line {line}: {message}"),
            AccountsError::Syntax {
                line: None,
                message,
            } => {
                write!(f, "accounts file: {message}")
            }
            AccountsError::DuplicateUsername(u) => {
                write!(f, "accounts file: username {u:?} appears twice")
            }
            AccountsError::DuplicatePid(p) => write!(f, "accounts file: PID {p} appears twice"),
            AccountsError::EmptyUsername => write!(f, "accounts file: an empty username"),
            AccountsError::EmptyPassword(u) => {
                write!(f, "accounts file: account {u:?} has an empty password")
            }
            AccountsError::TooManyAccounts(n) => write!(
                f,
                "accounts file: {n} accounts, at most {} allowed",
                Accounts::MAX_ACCOUNTS
            ),
        }
    }
}

impl std::error::Error for AccountsError {}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    key_scheme: KeyScheme,
    #[serde(default, rename = "account")]
    accounts: Vec<FileAccount>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAccount {
    username: String,
    pid: u64,
    password: String,
}

/// One account with its derived key.
#[derive(Clone, PartialEq, Eq)]
pub struct Account {
    /// The username clients log in with.
    pub username: String,
    /// The principal id.
    pub pid: u64,
    /// The Kerberos key derived from the PID and password.
    pub key: DerivedKey,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("username", &self.username)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// The loaded accounts, looked up by username or PID.
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    scheme: KeyScheme,
    accounts: Vec<Account>,
    by_name: HashMap<String, usize>,
    by_pid: HashMap<u64, usize>,
}

impl Accounts {
    /// The most accounts a file may hold.
    pub const MAX_ACCOUNTS: usize = 1 << 20;

    /// The longest accounts file read: room for [`MAX_ACCOUNTS`](Self::MAX_ACCOUNTS) of a
    /// few dozen bytes each.
    pub const MAX_FILE_LEN: u64 = 256 << 20;

    /// Reads and loads an accounts file (at most [`MAX_FILE_LEN`](Self::MAX_FILE_LEN) bytes: a
    /// path naming something endless, `/dev/zero`, is an error, not a process that grows until
    /// it is killed).
    pub fn load(path: &Path) -> Result<Self, AccountsError> {
        use std::io::Read;
        let io = |e: std::io::Error| AccountsError::Io {
            kind: e.kind(),
            message: format!("{}: {e}", path.display()),
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(Self::MAX_FILE_LEN + 1)
            .read_to_string(&mut text)
            .map_err(io)?;
        if text.len() as u64 > Self::MAX_FILE_LEN {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("longer than {} bytes", Self::MAX_FILE_LEN),
            )));
        }
        Self::parse(&text)
    }

    /// Loads accounts from the file's text, deriving every key in one batch.
    pub fn parse(text: &str) -> Result<Self, AccountsError> {
        let file: File = toml::from_str(text).map_err(|e| AccountsError::Syntax {
            line: e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1),
            message: e.message().to_string(),
        })?;
        if file.accounts.len() > Self::MAX_ACCOUNTS {
            return Err(AccountsError::TooManyAccounts(file.accounts.len()));
        }
        let n = file.accounts.len();
        let mut by_name = HashMap::with_capacity(n);
        let mut by_pid = HashMap::with_capacity(n);
        for (i, a) in file.accounts.iter().enumerate() {
            if a.username.is_empty() {
                return Err(AccountsError::EmptyUsername);
            }
            if a.password.is_empty() {
                return Err(AccountsError::EmptyPassword(a.username.clone()));
            }
            if by_name.insert(a.username.clone(), i).is_some() {
                return Err(AccountsError::DuplicateUsername(a.username.clone()));
            }
            if by_pid.insert(a.pid, i).is_some() {
                return Err(AccountsError::DuplicatePid(a.pid));
            }
        }
        let keys = derive_keys(file.key_scheme, &file.accounts)?;
        let accounts = file
            .accounts
            .into_iter()
            .zip(keys)
            .map(|(a, key)| Account {
                username: a.username,
                pid: a.pid,
                key,
            })
            .collect();
        Ok(Accounts {
            scheme: file.key_scheme,
            accounts,
            by_name,
            by_pid,
        })
    }

    /// The key scheme the keys were derived with.
    pub const fn key_scheme(&self) -> KeyScheme {
        self.scheme
    }

    /// The account with this username.
    pub fn by_username(&self, username: &str) -> Option<&Account> {
        self.by_name.get(username).map(|&i| &self.accounts[i])
    }

    /// The account with this PID.
    pub fn by_pid(&self, pid: u64) -> Option<&Account> {
        self.by_pid.get(&pid).map(|&i| &self.accounts[i])
    }

    /// Every account, in file order.
    pub fn iter(&self) -> impl Iterator<Item = &Account> {
        self.accounts.iter()
    }

    /// The number of accounts.
    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    /// `true` if there are none.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }
}

/// Every account's key, in order, in one batch.
fn derive_keys(
    scheme: KeyScheme,
    accounts: &[FileAccount],
) -> Result<Vec<DerivedKey>, AccountsError> {
    match scheme {
        KeyScheme::Kerberos => {
            let requests: Vec<KeyRequest<'_>> = accounts
                .iter()
                .map(|a| KeyRequest {
                    pid: a.pid,
                    password: a.password.as_bytes(),
                })
                .collect();
            let mut keys = vec![[0u8; 16]; requests.len()];
            // The output is exactly as long as the requests: the only error cannot happen.
            wirekit_accel::kerberos::derive_kerberos_keys(&requests, &mut keys)
                .map_err(|_| AccountsError::TooManyAccounts(accounts.len()))?;
            Ok(keys)
        }
        KeyScheme::Switch => Ok(accounts
            .iter()
            .map(|a| wirekit_core::kerberos::derive_switch_key(a.pid, a.password.as_bytes()))
            .collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path naming something endless is an error past the cap, not a process growing until
    /// it is killed.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_endless_accounts_file_is_refused() {
        let e = Accounts::load(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
    }
    use wirekit_core::kerberos::derive_kerberos_key;

    const FILE: &str = r#"
[[account]]
username = "alice"
pid = 1000
password = "wonderland"

[[account]]
username = "bob"
pid = 1799999999
password = "builder"
"#;

    #[test]
    fn loads_and_looks_up_with_batched_keys() {
        let a = Accounts::parse(FILE).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a.key_scheme(), KeyScheme::Kerberos);
        let alice = a.by_username("alice").unwrap();
        assert_eq!(alice.pid, 1000);
        assert_eq!(alice.key, derive_kerberos_key(1000, b"wonderland"));
        let bob = a.by_pid(1_799_999_999).unwrap();
        assert_eq!(bob.username, "bob");
        assert_eq!(bob.key, derive_kerberos_key(1_799_999_999, b"builder"));
        assert!(a.by_username("carol").is_none());
        assert!(a.by_pid(1).is_none());
        assert!(!format!("{alice:?}").contains("key"));
    }

    #[test]
    fn many_accounts_match_the_single_key_path() {
        let mut text = String::new();
        for i in 0..70u64 {
            text += &format!(
                "[[account]]\nusername = \"u{i}\"\npid = {}\npassword = \"p{i}\"\n",
                i * 31 + 5
            );
        }
        let a = Accounts::parse(&text).unwrap();
        for (i, acc) in a.iter().enumerate() {
            assert_eq!(
                acc.key,
                derive_kerberos_key(i as u64 * 31 + 5, format!("p{i}").as_bytes())
            );
        }
    }

    #[test]
    fn bad_files_are_typed_errors() {
        let dup = format!("{FILE}\n[[account]]\nusername = \"alice\"\npid = 5\npassword = \"x\"\n");
        assert_eq!(
            Accounts::parse(&dup).unwrap_err(),
            AccountsError::DuplicateUsername("alice".into())
        );
        let dup =
            format!("{FILE}\n[[account]]\nusername = \"carol\"\npid = 1000\npassword = \"x\"\n");
        assert_eq!(
            Accounts::parse(&dup).unwrap_err(),
            AccountsError::DuplicatePid(1000)
        );
        let missing = "[[account]]\nusername = \"a\"\n\npid = 1\n";
        assert!(matches!(
            Accounts::parse(missing).unwrap_err(),
            AccountsError::Syntax { line: Some(1), .. }
        ));
        let negative = "[[account]]\nusername = \"a\"\npid = -1\npassword = \"x\"\n";
        assert!(matches!(
            Accounts::parse(negative).unwrap_err(),
            AccountsError::Syntax { line: Some(3), .. }
        ));
        let unknown = "[[account]]\nusername = \"a\"\npid = 1\npassword = \"x\"\nadmin = true\n";
        assert!(matches!(
            Accounts::parse(unknown).unwrap_err(),
            AccountsError::Syntax { .. }
        ));
        assert_eq!(
            Accounts::parse("[[account]]\nusername = \"\"\npid = 1\npassword = \"x\"\n")
                .unwrap_err(),
            AccountsError::EmptyUsername
        );
        assert_eq!(
            Accounts::parse("[[account]]\nusername = \"a\"\npid = 1\npassword = \"\"\n")
                .unwrap_err(),
            AccountsError::EmptyPassword("a".into())
        );
        let switch = Accounts::parse(&format!("key_scheme = \"switch\"\n{FILE}")).unwrap();
        let alice = switch.by_username("alice").unwrap();
        assert_eq!(
            alice.key,
            wirekit_core::kerberos::derive_switch_key(1000, b"wonderland")
        );
        assert_ne!(alice.key, derive_kerberos_key(1000, b"wonderland"));
        assert!(matches!(
            Accounts::parse("key_scheme = \"md4\"\n").unwrap_err(),
            AccountsError::Syntax { line: Some(1), .. }
        ));
        assert!(matches!(
            Accounts::load(Path::new("/nonexistent/accounts.toml")).unwrap_err(),
            AccountsError::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        ));
        assert!(Accounts::parse("").unwrap().is_empty());
    }
}
