//! The ticket-granting (authentication, protocol 10) and secure-connection (protocol 11)
//! messages a NEX server answers, as typed bodies: read one with [`decode`](super::decode),
//! write one with [`encode`](super::encode). Field orders follow NintendoClients 4.4.0
//! (`nintendo/nex/authentication.py`, `secure.py`): the Wii U and 3DS authentication protocol
//! (`AuthenticationServer`), with 32- or 64-bit PIDs. The Switch's (`AuthenticationServerNX`:
//! ValidateAndRequestTicket methods, a source key in their replies and a key string after
//! RequestTicket's ticket) is not implemented.

use super::Error;
use super::stream::{List, NexRead, NexWrite, Reader, Writer};
use super::types::{AnyDataHolder, ResultCode, RvConnectionData, StationUrl};

/// The ticket-granting (authentication) protocol id.
pub const AUTHENTICATION_PROTOCOL: u16 = 10;
/// Authentication method 1: Login.
pub const METHOD_LOGIN: u32 = 1;
/// Authentication method 2: LoginEx.
pub const METHOD_LOGIN_EX: u32 = 2;
/// Authentication method 3: RequestTicket.
pub const METHOD_REQUEST_TICKET: u32 = 3;
/// The secure-connection protocol id.
pub const SECURE_CONNECTION_PROTOCOL: u16 = 11;
/// Secure-connection method 1: Register.
pub const METHOD_REGISTER: u32 = 1;

/// Login's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LoginRequest<'a> {
    /// The user name (on Nintendo servers, the PID in decimal).
    pub username: &'a str,
}

/// LoginEx's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LoginExRequest<'a> {
    /// The user name.
    pub username: &'a str,
    /// The extra data, usually an `AuthenticationInfo` carrying a token.
    pub auth_info: AnyDataHolder<'a>,
}

/// Login's and LoginEx's reply.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LoginResponse<'a> {
    /// The outcome.
    pub result: ResultCode,
    /// The user's PID.
    pub pid: u64,
    /// The ticket for the secure server, encrypted with the user's key.
    pub ticket: &'a [u8],
    /// Where the secure server is.
    pub connection_data: RvConnectionData<'a>,
    /// The server's build name.
    pub server_name: &'a str,
}

/// RequestTicket's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RequestTicketRequest {
    /// The requesting user.
    pub source_pid: u64,
    /// The server (or user) the ticket is for.
    pub target_pid: u64,
}

/// RequestTicket's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RequestTicketResponse<'a> {
    /// The outcome.
    pub result: ResultCode,
    /// The ticket.
    pub ticket: &'a [u8],
}

/// Register's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RegisterRequest<'a> {
    /// The client's station URLs (local, and public if known).
    pub urls: List<'a, StationUrl<'a>>,
}

/// Register's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RegisterResponse<'a> {
    /// The outcome.
    pub result: ResultCode,
    /// The connection id the server gave this client.
    pub connection_id: u32,
    /// The client's address as the server sees it.
    pub public_station: StationUrl<'a>,
}

impl<'a> NexRead<'a> for LoginRequest<'a> {
    const MIN_LEN: usize = 2;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(LoginRequest {
            username: r.string()?,
        })
    }
}

impl NexWrite for LoginRequest<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.string(self.username);
    }
}

impl<'a> NexRead<'a> for LoginExRequest<'a> {
    const MIN_LEN: usize = 12;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(LoginExRequest {
            username: r.string()?,
            auth_info: AnyDataHolder::read(r)?,
        })
    }
}

impl NexWrite for LoginExRequest<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.string(self.username).add(&self.auth_info);
    }
}

impl<'a> NexRead<'a> for LoginResponse<'a> {
    const MIN_LEN: usize = 22;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(LoginResponse {
            result: ResultCode::read(r)?,
            pid: r.pid()?,
            ticket: r.buffer()?,
            connection_data: RvConnectionData::read(r)?,
            server_name: r.string()?,
        })
    }
}

impl NexWrite for LoginResponse<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.add(&self.result)
            .pid(self.pid)
            .buffer(self.ticket)
            .add(&self.connection_data)
            .string(self.server_name);
    }
}

impl<'a> NexRead<'a> for RequestTicketRequest {
    const MIN_LEN: usize = 8;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(RequestTicketRequest {
            source_pid: r.pid()?,
            target_pid: r.pid()?,
        })
    }
}

impl NexWrite for RequestTicketRequest {
    fn write(&self, w: &mut Writer<'_>) {
        w.pid(self.source_pid).pid(self.target_pid);
    }
}

impl<'a> NexRead<'a> for RequestTicketResponse<'a> {
    const MIN_LEN: usize = 8;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(RequestTicketResponse {
            result: ResultCode::read(r)?,
            ticket: r.buffer()?,
        })
    }
}

impl NexWrite for RequestTicketResponse<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.add(&self.result).buffer(self.ticket);
    }
}

impl<'a> NexRead<'a> for RegisterRequest<'a> {
    const MIN_LEN: usize = 4;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(RegisterRequest { urls: r.list()? })
    }
}

impl NexWrite for RegisterRequest<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.add(&self.urls);
    }
}

impl<'a> NexRead<'a> for RegisterResponse<'a> {
    const MIN_LEN: usize = 10;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(RegisterResponse {
            result: ResultCode::read(r)?,
            connection_id: r.u32()?,
            public_station: StationUrl::read(r)?,
        })
    }
}

impl NexWrite for RegisterResponse<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.add(&self.result)
            .u32(self.connection_id)
            .add(&self.public_station);
    }
}
