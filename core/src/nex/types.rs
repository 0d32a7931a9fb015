//! The NEX data types an RMC handler meets beyond the scalars: result codes, DateTime,
//! Variant, StationURL, AnyDataHolder and RVConnectionData.

use core::fmt;

use super::stream::{List, NexRead, NexWrite, Reader, Writer};
use super::{Error, StationUrlError};
use crate::BufferTooSmall;

/// A NEX result code: bit 31 set is an error, clear a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ResultCode(pub u32);

impl ResultCode {
    /// The error bit.
    pub const ERROR_BIT: u32 = 1 << 31;
    /// Success as NEX servers send it (`Core::Unknown` without the error bit, 0x00010001).
    pub const SUCCESS: ResultCode = ResultCode(0x0001_0001);
    /// `Core::Unknown` as an error.
    pub const CORE_UNKNOWN: ResultCode = ResultCode::error(0x0001_0001);
    /// `Core::AccessDenied`.
    pub const ACCESS_DENIED: ResultCode = ResultCode::error(0x0001_0006);
    /// `RendezVous::InvalidUsername`.
    pub const INVALID_USERNAME: ResultCode = ResultCode::error(0x0003_0064);
    /// `RendezVous::InvalidPassword`.
    pub const INVALID_PASSWORD: ResultCode = ResultCode::error(0x0003_0065);
    /// `RendezVous::InvalidPID`.
    pub const INVALID_PID: ResultCode = ResultCode::error(0x0003_006B);

    /// The error with `code` (the error bit is set).
    pub const fn error(code: u32) -> Self {
        ResultCode(code | Self::ERROR_BIT)
    }

    /// `true` if the error bit is clear.
    pub const fn is_success(self) -> bool {
        self.0 & Self::ERROR_BIT == 0
    }

    /// `true` if the error bit is set.
    pub const fn is_error(self) -> bool {
        !self.is_success()
    }
}

impl<'a> NexRead<'a> for ResultCode {
    const MIN_LEN: usize = 4;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        r.u32().map(ResultCode)
    }
}

impl NexWrite for ResultCode {
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(self.0);
    }
}

/// A NEX DateTime: a u64 packing `year << 26 | month << 22 | day << 17 | hour << 12 |
/// minute << 6 | second`. 0 means "never".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DateTime(pub u64);

impl DateTime {
    /// The zero value, "never".
    pub const NEVER: DateTime = DateTime(0);

    /// The DateTime of a calendar date and time of day, or `None` if a field is out of range
    /// (month 1 to 12, day 1 to 31, hour below 24, minute and second below 60, year below
    /// 2^38).
    pub const fn new(
        year: u64,
        month: u8,
        day: u8,
        hour: u8,
        minute: u8,
        second: u8,
    ) -> Option<Self> {
        if year >= 1 << 38
            || month == 0
            || month > 12
            || day == 0
            || day > 31
            || hour > 23
            || minute > 59
            || second > 59
        {
            return None;
        }
        Some(DateTime::pack(
            year,
            month as u64,
            day as u64,
            hour as u64,
            minute as u64,
            second as u64,
        ))
    }

    /// The UTC DateTime of a Unix time in seconds (the caller reads the clock); a time past
    /// the year field's range (2^38 - 1) is its last second.
    pub const fn from_unix(seconds: u64) -> Self {
        let days = seconds / 86_400;
        let secs = seconds % 86_400;
        // Howard Hinnant's civil_from_days, for days since 1970-01-01 (non-negative here).
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
        // Past the field's last year (some 8.7e18 seconds on): its last second, not a year
        // wrapped into the 38 bits.
        if year >= 1 << 38 {
            return DateTime::pack((1 << 38) - 1, 12, 31, 23, 59, 59);
        }
        DateTime::pack(year, month, day, secs / 3600, secs / 60 % 60, secs % 60)
    }

    /// The packed value of fields already in range.
    const fn pack(year: u64, month: u64, day: u64, hour: u64, minute: u64, second: u64) -> Self {
        DateTime((year << 26) | (month << 22) | (day << 17) | (hour << 12) | (minute << 6) | second)
    }

    /// The year.
    pub const fn year(self) -> u64 {
        self.0 >> 26
    }
    /// The month (1 to 12 when built by [`DateTime::new`]; the wire may hold 0 to 15).
    pub const fn month(self) -> u8 {
        (self.0 >> 22 & 15) as u8
    }
    /// The day of the month.
    pub const fn day(self) -> u8 {
        (self.0 >> 17 & 31) as u8
    }
    /// The hour.
    pub const fn hour(self) -> u8 {
        (self.0 >> 12 & 31) as u8
    }
    /// The minute.
    pub const fn minute(self) -> u8 {
        (self.0 >> 6 & 63) as u8
    }
    /// The second.
    pub const fn second(self) -> u8 {
        (self.0 & 63) as u8
    }
}

impl<'a> NexRead<'a> for DateTime {
    const MIN_LEN: usize = 8;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        r.u64().map(DateTime)
    }
}

impl NexWrite for DateTime {
    fn write(&self, w: &mut Writer<'_>) {
        w.u64(self.0);
    }
}

/// A Variant: a type byte, then the value. Doubles compare by their bits (as the wire holds
/// them), so a NaN equals itself and `0.0` differs from `-0.0`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Variant<'a> {
    /// 0: no value.
    None,
    /// 1: a signed 64-bit integer.
    I64(i64),
    /// 2: a double.
    F64(f64),
    /// 3: a bool.
    Bool(bool),
    /// 4: a String.
    String(&'a str),
    /// 5: a DateTime.
    DateTime(DateTime),
    /// 6: an unsigned 64-bit integer.
    U64(u64),
}

impl PartialEq for Variant<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (*self, *other) {
            (Variant::F64(a), Variant::F64(b)) => a.to_bits() == b.to_bits(),
            (Variant::None, Variant::None) => true,
            (Variant::I64(a), Variant::I64(b)) => a == b,
            (Variant::Bool(a), Variant::Bool(b)) => a == b,
            (Variant::String(a), Variant::String(b)) => a == b,
            (Variant::DateTime(a), Variant::DateTime(b)) => a == b,
            (Variant::U64(a), Variant::U64(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Variant<'_> {}

impl<'a> NexRead<'a> for Variant<'a> {
    const MIN_LEN: usize = 1;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(match r.u8()? {
            0 => Variant::None,
            1 => Variant::I64(r.i64()?),
            2 => Variant::F64(r.f64()?),
            3 => Variant::Bool(r.bool()?),
            4 => Variant::String(r.string()?),
            5 => Variant::DateTime(DateTime(r.u64()?)),
            6 => Variant::U64(r.u64()?),
            _ => return Err(Error::BadVariantType),
        })
    }
}

impl NexWrite for Variant<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        match *self {
            Variant::None => w.u8(0),
            Variant::I64(v) => w.u8(1).i64(v),
            Variant::F64(v) => w.u8(2).f64(v),
            Variant::Bool(v) => w.u8(3).bool(v),
            Variant::String(v) => w.u8(4).string(v),
            Variant::DateTime(v) => w.u8(5).u64(v.0),
            Variant::U64(v) => w.u8(6).u64(v),
        };
    }
}

/// A StationURL: `scheme:/key=value;key=value`, carried as a String, viewed in place.
///
/// [`StationUrl::parse`] checks the shape once (a `:/` after the scheme, every parameter one
/// `key=value` with a non-empty key); the accessors then walk the text. The empty string is
/// accepted as a URL with no scheme and no parameters.
///
/// ```
/// use wirekit_core::nex::{StationUrl, UrlValue};
///
/// let mut buf = [0u8; 64];
/// let n = StationUrl::format(
///     "prudps",
///     &[("address", UrlValue::Str("10.0.0.1")), ("port", UrlValue::Int(60001))],
///     &mut buf,
/// )?;
/// let url = StationUrl::parse(core::str::from_utf8(&buf[..n])?)?;
/// assert_eq!(url.as_str(), "prudps:/address=10.0.0.1;port=60001");
/// assert_eq!(url.param_u64("port")?, Some(60001));
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StationUrl<'a> {
    text: &'a str,
    scheme_len: usize,
}

/// A StationURL parameter value to format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UrlValue<'a> {
    /// Text (must not contain `;`, `=` or NUL).
    Str(&'a str),
    /// A decimal integer.
    Int(u64),
}

impl<'a> StationUrl<'a> {
    /// The empty URL (an empty String on the wire).
    pub const EMPTY: StationUrl<'static> = StationUrl {
        text: "",
        scheme_len: 0,
    };

    /// Checks and views `text`.
    pub fn parse(text: &'a str) -> Result<Self, StationUrlError> {
        if text.is_empty() {
            return Ok(StationUrl::EMPTY);
        }
        let scheme_len = text.find(":/").ok_or(StationUrlError::NoScheme)?;
        let url = StationUrl { text, scheme_len };
        if text[..scheme_len].contains([';', '=', '\0']) {
            return Err(StationUrlError::BadParam);
        }
        for field in url.fields() {
            let mut kv = field.split('=');
            let key = kv.next().unwrap_or("");
            if key.is_empty() || kv.next().is_none() || kv.next().is_some() || field.contains('\0')
            {
                return Err(StationUrlError::BadParam);
            }
        }
        Ok(url)
    }

    /// The whole text.
    pub const fn as_str(&self) -> &'a str {
        self.text
    }

    /// The scheme (`prudp`, `prudps`, `udp`), empty for the empty URL.
    pub fn scheme(&self) -> &'a str {
        &self.text[..self.scheme_len]
    }

    fn fields(&self) -> impl Iterator<Item = &'a str> + use<'a> {
        let rest = self.text.get(self.scheme_len + 2..).unwrap_or("");
        rest.split(';').filter(move |_| !rest.is_empty())
    }

    /// The parameters in order, as `(key, value)`.
    pub fn params(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
        self.fields().filter_map(|f| f.split_once('='))
    }

    /// The value of the parameter named `key` (names compare exactly); of its last occurrence
    /// where the key repeats, as NintendoClients reads a URL (into a dict, the last value
    /// standing), so that a URL checked here names the address its peers will use.
    pub fn param(&self, key: &str) -> Option<&'a str> {
        self.params()
            .filter(|(k, _)| *k == key)
            .last()
            .map(|(_, v)| v)
    }

    /// A parameter as a decimal integer: `None` if absent, an error if not a number.
    pub fn param_u64(&self, key: &str) -> Result<Option<u64>, StationUrlError> {
        self.param(key)
            .map(|v| v.parse().map_err(|_| StationUrlError::NotANumber))
            .transpose()
    }

    /// The length [`StationUrl::format`] writes for these parts (`usize::MAX` where it would
    /// not fit in one: no buffer holds it).
    pub fn format_len(scheme: &str, params: &[(&str, UrlValue<'_>)]) -> usize {
        let mut n = scheme.len().saturating_add(2);
        for (i, (key, value)) in params.iter().enumerate() {
            n = n
                .saturating_add(usize::from(i > 0) + 1)
                .saturating_add(key.len());
            n = n.saturating_add(match value {
                UrlValue::Str(s) => s.len(),
                UrlValue::Int(v) => decimal_len(*v),
            });
        }
        n
    }

    /// Writes `scheme:/k=v;k=v` into `out` and returns its length. Keys and text values must
    /// not contain `;`, `=` or NUL, keys must not be empty; on any error nothing is written.
    pub fn format(
        scheme: &str,
        params: &[(&str, UrlValue<'_>)],
        out: &mut [u8],
    ) -> Result<usize, StationUrlError> {
        let bad = |s: &str| s.contains([';', '=', '\0']);
        if bad(scheme) || scheme.contains(":/") {
            return Err(StationUrlError::BadParam);
        }
        for (key, value) in params {
            if key.is_empty() || bad(key) || matches!(value, UrlValue::Str(s) if bad(s)) {
                return Err(StationUrlError::BadParam);
            }
        }
        let required = Self::format_len(scheme, params);
        let out = out
            .get_mut(..required)
            .ok_or(StationUrlError::BufferTooSmall(BufferTooSmall { required }))?;
        let mut at = 0;
        let mut put = |b: &[u8]| {
            out[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        };
        put(scheme.as_bytes());
        put(b":/");
        for (i, (key, value)) in params.iter().enumerate() {
            if i > 0 {
                put(b";");
            }
            put(key.as_bytes());
            put(b"=");
            match value {
                UrlValue::Str(s) => put(s.as_bytes()),
                UrlValue::Int(v) => {
                    let mut digits = [0u8; 20];
                    let n = decimal_len(*v);
                    let mut v = *v;
                    for d in digits[..n].iter_mut().rev() {
                        *d = b'0' + (v % 10) as u8;
                        v /= 10;
                    }
                    put(&digits[..n]);
                }
            }
        }
        Ok(required)
    }
}

/// The digits of `v` in decimal.
const fn decimal_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

impl fmt::Display for StationUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

impl<'a> NexRead<'a> for StationUrl<'a> {
    const MIN_LEN: usize = 2;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        StationUrl::parse(r.string()?).map_err(Error::StationUrl)
    }
}

impl NexWrite for StationUrl<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.string(self.text);
    }
}

/// An AnyDataHolder: the class name (String), a u32 length (the inner length + 4), a u32
/// inner length, then the inner object's bytes (read by the caller, who knows the class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AnyDataHolder<'a> {
    /// The class name, e.g. `AuthenticationInfo`.
    pub name: &'a str,
    /// The object's encoded fields (with their structure headers, if the stream has them).
    pub data: &'a [u8],
}

impl<'a> NexRead<'a> for AnyDataHolder<'a> {
    const MIN_LEN: usize = 10;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        let name = r.string()?;
        let outer = r.u32()?;
        let inner = r.u32()?;
        if inner.checked_add(4) != Some(outer) {
            return Err(Error::DataHolderLength);
        }
        let len = inner as usize;
        if len > r.context().limits.max_buffer {
            return Err(Error::TooLong);
        }
        let data = r.bytes(len)?;
        Ok(AnyDataHolder { name, data })
    }
}

impl NexWrite for AnyDataHolder<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        let outer = w.length_u32(self.data.len().saturating_add(4));
        w.string(self.name).u32(outer).buffer(self.data);
    }
}

/// RVConnectionData, in Login's reply: where the secure server is.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RvConnectionData<'a> {
    /// The secure server's StationURL.
    pub main_station: StationUrl<'a>,
    /// Protocol ids served at the special station.
    pub special_protocols: List<'a, u8>,
    /// The special station's URL (usually `prudp:/`).
    pub special_station: StationUrl<'a>,
    /// The server's time: present from NEX 3.5 on in structure version 1, `None` before.
    pub server_time: Option<DateTime>,
}

impl<'a> NexRead<'a> for RvConnectionData<'a> {
    const MIN_LEN: usize = 8;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        let new = r.context().nex_version >= 30500;
        r.structure(|version, r| {
            Ok(RvConnectionData {
                main_station: StationUrl::read(r)?,
                special_protocols: r.list()?,
                special_station: StationUrl::read(r)?,
                server_time: if new && version >= 1 {
                    Some(DateTime::read(r)?)
                } else {
                    None
                },
            })
        })
    }
}

impl NexWrite for RvConnectionData<'_> {
    /// Writes structure version 1 with the server time from NEX 3.5 on when there is one,
    /// version 0 without it otherwise. Without structure headers there is no version to say
    /// so, and no time (as NintendoClients does it); a NEX 3.5 server sets `server_time`.
    fn write(&self, w: &mut Writer<'_>) {
        let ctx = w.context();
        let time = self
            .server_time
            .filter(|_| ctx.nex_version >= 30500 && ctx.struct_header);
        w.structure(u8::from(time.is_some()), |w| {
            w.add(&self.main_station)
                .add(&self.special_protocols)
                .add(&self.special_station);
            if let Some(time) = time {
                w.add(&time);
            }
        });
    }
}
