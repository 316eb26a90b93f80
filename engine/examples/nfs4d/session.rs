//! NFSv4.1 client IDs and sessions (RFC 8881 §2.10, §18.35, §18.36, §18.46): what a
//! COMPOUND runs in. EXCHANGE_ID makes a client ID, CREATE_SESSION a session with a slot
//! table whose replies are kept for replays (exactly-once semantics, §2.10.6), SEQUENCE
//! opens every other COMPOUND on a slot, DESTROY_SESSION and DESTROY_CLIENTID end them.
//! A session created with CREATE_SESSION4_FLAG_CONN_BACK_CHAN has its back channel on the
//! connection it was created on (§2.10.3.1): the callbacks go there, in RFC 8167's
//! backward direction.

use std::collections::{HashMap, HashSet};

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

use crate::grace::Grace;
use crate::nfs4common::Channel;
use rpcrdma_proto::EncodeError;

pub use crate::nfs4common::{op, status};

/// CREATE_SESSION4_FLAG_CONN_BACK_CHAN.
pub const CONN_BACK_CHAN: u32 = 0x2;
/// EXCHGID4_FLAG_USE_NON_PNFS: a plain NFS server (§18.35.3).
const USE_NON_PNFS: u32 = 0x0001_0000;
/// EXCHGID4_FLAG_CONFIRMED_R: the client ID has a session (§18.35.3).
const CONFIRMED_R: u32 = 0x8000_0000;
/// Most slots a session's fore channel has.
pub const MAX_SLOTS: u32 = 16;
/// Largest COMPOUND results written inline (a READ's data, at the end, goes beside them
/// through the client's Write chunk; larger results through its Reply chunk).
pub const MAX_COMPOUND: u32 = 65536;
/// Largest READ or WRITE.
pub const MAX_IO: u32 = 1 << 20;
/// Largest COMPOUND request and reply, a WRITE's or READ's data included: what the fore
/// channel grants (the Linux client sizes its `wsize` and `rsize` by them).
pub const MAX_RPC: u32 = MAX_IO + 8192;

/// A session's ID.
pub type SessionId = [u8; 16];

/// One slot of a session's fore channel: its last sequence ID and the reply it gave (its
/// buffer kept from request to request).
#[derive(Default)]
struct Slot {
    seq: u32,
    reply: Vec<u8>,
    cached: bool,
    /// Its request is being run: a retransmission meanwhile is NFS4ERR_DELAY.
    busy: bool,
}

/// A session.
pub struct Session {
    pub clientid: u64,
    slots: Vec<Slot>,
    /// The connection its back channel rides (the one CREATE_SESSION came on), and the
    /// program, credential flavor and slot size the client named for callbacks.
    pub back: Option<BackChannel>,
    /// A SEQUENCE has opened a COMPOUND on it: the client has the session (the Linux
    /// client answers a CB_SEQUENCE sent before it took CREATE_SESSION's reply in with
    /// NFS4ERR_BADSESSION).
    pub used: bool,
}

/// Where and how to call a session's client back.
#[derive(Clone, Copy, Debug)]
pub struct BackChannel {
    pub conn: u64,
    pub program: u32,
    /// The credential flavor the client asked callbacks to carry (AUTH_NONE 0 or
    /// AUTH_SYS 1).
    pub flavor: u32,
    pub max_request: u32,
}

/// A client ID.
struct Client {
    owner: Vec<u8>,
    verifier: [u8; 8],
    /// The sequence ID its next CREATE_SESSION must carry.
    seq: u32,
    /// The last CREATE_SESSION's reply, for its replay (§18.36.4).
    last_create: Option<Vec<u8>>,
    confirmed: bool,
}

/// Every client ID and session of the server.
pub struct State {
    boot: u32,
    next_client: u32,
    next_session: u32,
    clients: HashMap<u64, Client>,
    sessions: HashMap<SessionId, Session>,
    /// Sessions created with a back channel, for the caller to call back.
    pub new_back_channels: Vec<(SessionId, BackChannel)>,
    /// Client IDs that went (DESTROY_CLIENTID, a client restarted), for their open and
    /// lock state to go too.
    pub gone_clients: Vec<u64>,
    /// Clients whose back channel answered a CB_SEQUENCE: they may hold delegations.
    pub cb_up: HashSet<u64>,
    /// The clients' records and the grace period after a restart.
    pub grace: Grace,
}

/// Decodes with `?` on a reader, BADXDR on a short or bad item.
macro_rules! x {
    ($e:expr) => {
        $e.map_err(|_| status::BADXDR)?
    };
}

impl State {
    /// An empty state; `boot` distinguishes this instance's client IDs and sessions.
    pub fn new(boot: u32) -> State {
        State {
            boot,
            next_client: 1,
            next_session: 1,
            clients: HashMap::new(),
            sessions: HashMap::new(),
            new_back_channels: Vec::new(),
            gone_clients: Vec::new(),
            cb_up: HashSet::new(),
            grace: Grace::none(),
        }
    }

    /// The same, with the clients' records and grace period `grace`.
    pub fn with_grace(self, grace: Grace) -> State {
        State { grace, ..self }
    }

    /// Whether the server is in its grace period.
    pub fn in_grace(&mut self) -> bool {
        self.grace.in_grace()
    }

    /// Whether `clientid` may reclaim state it held before a restart.
    pub fn may_reclaim(&mut self, clientid: u64) -> bool {
        match self.clients.get(&clientid) {
            Some(c) => self.grace.may_reclaim(&c.owner),
            None => false,
        }
    }

    /// Live sessions.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The back channel of `session`, if it still has one, and whether the client has
    /// used the session yet.
    pub fn back_channel(&self, session: &SessionId) -> Option<(BackChannel, bool)> {
        self.sessions
            .get(session)
            .and_then(|s| s.back.map(|b| (b, s.used)))
    }

    /// The client ID of `session`.
    pub fn client_of(&self, session: &SessionId) -> Option<u64> {
        self.sessions.get(session).map(|s| s.clientid)
    }

    /// Copies the reply slot `k` of `session` gave into `out`: its length.
    pub fn replay(&self, session: &SessionId, k: u32, out: &mut [u8]) -> usize {
        let Some(reply) = self
            .sessions
            .get(session)
            .and_then(|s| s.slots.get(k as usize))
            .map(|s| &s.reply)
        else {
            return 0;
        };
        let len = reply.len().min(out.len());
        out[..len].copy_from_slice(&reply[..len]);
        len
    }

    /// Ends the request on slot `k` of `session`: its reply kept for a retransmission
    /// (`Some`), or not (a reply whose data went through the client's Write chunk: a
    /// retransmission then gets NFS4ERR_RETRY_UNCACHED_REP, §2.10.6.1.3).
    pub fn finish(&mut self, session: &SessionId, k: u32, reply: Option<&[u8]>) {
        if let Some(slot) = self
            .sessions
            .get_mut(session)
            .and_then(|s| s.slots.get_mut(k as usize))
        {
            slot.busy = false;
            slot.reply.clear();
            if let Some(r) = reply {
                slot.reply.extend_from_slice(r);
            }
            slot.cached = reply.is_some();
        }
    }

    /// One operation other than SEQUENCE: its status written on success (the caller
    /// writes a failure's), then its results.
    pub fn run_op(
        &mut self,
        conn: u64,
        client: Option<u64>,
        opnum: u32,
        r: &mut XdrReader<'_>,
        w: &mut XdrWriter<'_>,
    ) -> Result<(), u32> {
        match opnum {
            op::EXCHANGE_ID => self.exchange_id(r, w),
            op::CREATE_SESSION => self.create_session(conn, r, w),
            op::DESTROY_SESSION => {
                let sid: SessionId = x!(r.opaque_fixed(16))
                    .try_into()
                    .map_err(|_| status::BADXDR)?;
                self.sessions.remove(&sid).ok_or(status::BADSESSION)?;
                ok(w)
            }
            op::DESTROY_CLIENTID => {
                let id = x!(r.u64());
                if !self.clients.contains_key(&id) {
                    return Err(status::STALE_CLIENTID);
                }
                if self.sessions.values().any(|s| s.clientid == id) {
                    return Err(status::CLIENTID_BUSY);
                }
                if let Some(c) = self.clients.remove(&id) {
                    self.grace.destroyed(&c.owner);
                }
                self.gone_clients.push(id);
                self.cb_up.remove(&id);
                ok(w)
            }
            op::RECLAIM_COMPLETE => {
                // The client reclaimed what it held before a restart (§18.51).
                x!(r.bool());
                if let Some(c) = client.and_then(|id| self.clients.get(&id)) {
                    self.grace.reclaim_complete(&c.owner);
                }
                ok(w)
            }
            op::BACKCHANNEL_CTL => {
                // The callback program and credentials stay those CREATE_SESSION named.
                x!(r.u32());
                let n = x!(r.array_len(4, 16));
                for _ in 0..n {
                    sec_parms(r)?;
                }
                ok(w)
            }
            op::BIND_CONN_TO_SESSION => self.bind_conn(conn, r, w),
            // Not a session operation: the COMPOUND runs it as a file operation.
            _ => Err(status::NOTSUPP),
        }
    }

    /// EXCHANGE_ID (§18.35): a client ID for the owner, the same one again for the same
    /// owner and verifier.
    fn exchange_id(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Result<(), u32> {
        let verifier: [u8; 8] = x!(r.opaque_fixed(8))
            .try_into()
            .map_err(|_| status::BADXDR)?;
        let owner = x!(r.opaque_var(1024)).to_vec();
        let flags = x!(r.u32());
        match x!(r.u32()) {
            0 => {}
            1 => {
                // SP4_MACH_CRED: two bitmaps, answered with SP4_NONE below.
                for _ in 0..2 {
                    let n = x!(r.array_len(4, 64));
                    x!(r.skip(4 * n as usize));
                }
            }
            _ => return Err(status::NOTSUPP),
        }
        if x!(r.array_len(4, 1)) == 1 {
            x!(r.opaque_var(1024));
            x!(r.opaque_var(1024));
            x!(r.skip(12));
        }
        if flags & 0x4000_0000 != 0 && !self.clients.values().any(|c| c.owner == owner) {
            // EXCHGID4_FLAG_UPD_CONFIRMED_REC_A for an owner not known.
            return Err(status::NOTSUPP);
        }
        let known = self
            .clients
            .iter()
            .find(|(_, c)| c.owner == owner && c.verifier == verifier)
            .map(|(id, _)| *id);
        let id = match known {
            Some(id) => id,
            None => {
                // A new verifier for a known owner: the client restarted (§18.35.4 case
                // 5); its old state goes.
                let old: Vec<u64> = self
                    .clients
                    .iter()
                    .filter(|(_, c)| c.owner == owner)
                    .map(|(id, _)| *id)
                    .collect();
                for id in old {
                    self.clients.remove(&id);
                    self.gone_clients.push(id);
                    self.sessions.retain(|_, s| s.clientid != id);
                }
                let id = u64::from(self.boot) << 32 | u64::from(self.next_client);
                self.next_client += 1;
                self.clients.insert(
                    id,
                    Client {
                        owner: owner.clone(),
                        verifier,
                        seq: 1,
                        last_create: None,
                        confirmed: false,
                    },
                );
                id
            }
        };
        let c = &self.clients[&id];
        let scope = b"nfs4d";
        (|| {
            w.put_u32(status::OK)?;
            w.put_u64(id)?;
            w.put_u32(c.seq)?;
            w.put_u32(USE_NON_PNFS | if c.confirmed { CONFIRMED_R } else { 0 })?;
            w.put_u32(0)?; // SP4_NONE
            w.put_u64(0)?; // so_minor_id
            w.put_opaque_var(scope, 1024)?; // so_major_id
            w.put_opaque_var(scope, 1024)?; // server scope
            w.put_u32(0) // no implementation ID
        })()
        .map_err(|_: EncodeError| status::INVAL)
    }

    /// CREATE_SESSION (§18.36): a session for a client ID at its expected sequence ID
    /// (the last one's reply again for a replay); its back channel on `conn` if asked.
    fn create_session(
        &mut self,
        conn: u64,
        r: &mut XdrReader<'_>,
        w: &mut XdrWriter<'_>,
    ) -> Result<(), u32> {
        let id = x!(r.u64());
        let seq = x!(r.u32());
        let flags = x!(r.u32());
        let fore = Channel::read(r).ok_or(status::BADXDR)?;
        let back = Channel::read(r).ok_or(status::BADXDR)?;
        let program = x!(r.u32());
        let n = x!(r.array_len(4, 16));
        let mut flavor = None;
        for _ in 0..n {
            let f = sec_parms(r)?;
            if f <= 1 && flavor.is_none() {
                flavor = Some(f);
            }
        }
        let client = self.clients.get_mut(&id).ok_or(status::STALE_CLIENTID)?;
        if seq.wrapping_add(1) == client.seq {
            if let Some(reply) = &client.last_create {
                return w.put_raw(reply).map_err(|_| status::INVAL);
            }
        }
        if seq != client.seq {
            return Err(status::SEQ_MISORDERED);
        }
        let start = w.position();
        let sid = {
            let mut s = [0u8; 16];
            s[..8].copy_from_slice(&id.to_be_bytes());
            s[8..12].copy_from_slice(&self.boot.to_be_bytes());
            s[12..].copy_from_slice(&self.next_session.to_be_bytes());
            s
        };
        self.next_session += 1;
        let granted = Channel {
            max_request: fore.max_request.min(MAX_RPC),
            max_response: fore.max_response.min(MAX_RPC),
            max_response_cached: fore.max_response_cached.min(MAX_COMPOUND),
            max_operations: fore.max_operations.min(32),
            max_requests: fore.max_requests.clamp(1, MAX_SLOTS),
        };
        // The back channel as the client asked: the Linux client takes no other.
        let with_back = flags & CONN_BACK_CHAN != 0 && flavor.is_some();
        let out_flags = if with_back { CONN_BACK_CHAN } else { 0 };
        (|| {
            w.put_u32(status::OK)?;
            w.put_opaque_fixed(&sid)?;
            w.put_u32(seq)?;
            w.put_u32(out_flags)?;
            granted.put(w)?;
            back.put(w)
        })()
        .map_err(|_: EncodeError| status::INVAL)?;
        client.last_create = Some(w.written()[start..].to_vec());
        client.seq = seq.wrapping_add(1);
        if !client.confirmed {
            client.confirmed = true;
            self.grace.confirmed(&client.owner);
        }
        let bc = with_back.then(|| BackChannel {
            conn,
            program,
            flavor: flavor.unwrap_or(0),
            max_request: back.max_request,
        });
        self.sessions.insert(
            sid,
            Session {
                clientid: id,
                slots: (0..granted.max_requests).map(|_| Slot::default()).collect(),
                back: bc,
                used: false,
            },
        );
        if let Some(bc) = bc {
            self.new_back_channels.push((sid, bc));
        }
        Ok(())
    }

    /// BIND_CONN_TO_SESSION (§18.34): the connection `conn` carries the session's fore
    /// channel and, when the client asks, its back channel from now on (a client that
    /// reconnected).
    fn bind_conn(
        &mut self,
        conn: u64,
        r: &mut XdrReader<'_>,
        w: &mut XdrWriter<'_>,
    ) -> Result<(), u32> {
        let sid: SessionId = x!(r.opaque_fixed(16))
            .try_into()
            .map_err(|_| status::BADXDR)?;
        let dir = x!(r.u32());
        x!(r.bool());
        let s = self.sessions.get_mut(&sid).ok_or(status::BADSESSION)?;
        // CDFC4_FORE 1, CDFC4_BACK 2, CDFC4_FORE_OR_BOTH 3, CDFC4_BACK_OR_BOTH 7.
        let both = matches!(dir, 3 | 7) || dir == 2;
        if both {
            if let Some(b) = s.back.as_mut() {
                b.conn = conn;
                let bc = *b;
                self.new_back_channels.push((sid, bc));
            }
        }
        (|| {
            w.put_u32(status::OK)?;
            w.put_opaque_fixed(&sid)?;
            w.put_u32(if both { 3 } else { 1 })?; // CDFS4_BOTH or CDFS4_FORE
            w.put_bool(false)
        })()
        .map_err(|_: EncodeError| status::INVAL)
    }

    /// SEQUENCE (§18.46): the slot's next request, or a replay of its last.
    pub fn sequence(
        &mut self,
        r: &mut XdrReader<'_>,
        w: &mut XdrWriter<'_>,
    ) -> Result<Sequenced, u32> {
        let sid: SessionId = x!(r.opaque_fixed(16))
            .try_into()
            .map_err(|_| status::BADXDR)?;
        let seq = x!(r.u32());
        let k = x!(r.u32());
        x!(r.u32());
        x!(r.bool());
        let s = self.sessions.get_mut(&sid).ok_or(status::BADSESSION)?;
        let nslots = s.slots.len() as u32;
        let slot = s.slots.get_mut(k as usize).ok_or(status::BADSLOT)?;
        if seq == slot.seq && seq != 0 {
            return if slot.busy {
                Err(status::DELAY)
            } else if slot.cached {
                Ok(Sequenced::Replay((sid, k)))
            } else {
                Err(status::RETRY_UNCACHED_REP)
            };
        }
        if seq != slot.seq.wrapping_add(1) {
            return Err(status::SEQ_MISORDERED);
        }
        slot.seq = seq;
        slot.cached = false;
        slot.busy = true;
        s.used = true;
        (|| {
            w.put_u32(status::OK)?;
            w.put_opaque_fixed(&sid)?;
            w.put_u32(seq)?;
            w.put_u32(k)?;
            w.put_u32(nslots - 1)?;
            w.put_u32(nslots - 1)?;
            w.put_u32(0) // status flags
        })()
        .map_err(|_: EncodeError| status::INVAL)?;
        Ok(Sequenced::New((sid, k)))
    }
}

/// What SEQUENCE decided.
pub enum Sequenced {
    /// A new request on this slot.
    New((SessionId, u32)),
    /// A retransmission: the reply this session's slot gave again.
    Replay((SessionId, u32)),
}

/// Operations that may open a COMPOUND without SEQUENCE (§18.46.3: EXCHANGE_ID,
/// CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID, BIND_CONN_TO_SESSION).
pub fn sessionless(opnum: u32) -> bool {
    matches!(
        opnum,
        op::EXCHANGE_ID | op::CREATE_SESSION | op::DESTROY_SESSION | op::DESTROY_CLIENTID | 41
    )
}

/// Reads one `callback_sec_parms4` (AUTH_NONE, AUTH_SYS, RPCSEC_GSS): its flavor.
fn sec_parms(r: &mut XdrReader<'_>) -> Result<u32, u32> {
    let flavor = x!(r.u32());
    match flavor {
        0 => {}
        1 => {
            x!(r.u32());
            x!(r.opaque_var(255));
            x!(r.skip(8));
            let g = x!(r.array_len(4, 16));
            x!(r.skip(4 * g as usize));
        }
        6 => {
            x!(r.u32());
            x!(r.opaque_var(1024));
            x!(r.opaque_var(1024));
        }
        _ => return Err(status::BADXDR),
    }
    Ok(flavor)
}

/// NFS4_OK alone.
fn ok(w: &mut XdrWriter<'_>) -> Result<(), u32> {
    w.put_u32(status::OK).map_err(|_| status::INVAL)
}

/// A COMPOUND reply without results: status and tag.
pub fn header_only(w: &mut XdrWriter<'_>, s: u32, tag: &[u8]) -> usize {
    let _ = w.put_u32(s);
    let _ = w.put_opaque_var(tag, 1024);
    let _ = w.put_u32(0);
    w.position()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::nfs4common::{compound_of, words};

    /// A COMPOUND of `ops` (operation number, encoded arguments), minor version 1.
    fn compound(ops: &[(u32, Vec<u8>)]) -> Vec<u8> {
        compound_of(b"t", &[1], ops)
    }

    fn exchange_id(owner: &[u8], verifier: u8) -> Vec<u8> {
        let mut a = vec![verifier; 8];
        let mut o = vec![0u8; 64];
        let mut w = XdrWriter::new(&mut o);
        w.put_opaque_var(owner, 64).unwrap();
        let n = w.position();
        a.extend(&o[..n]);
        a.extend(words(&[0, 0, 0])); // flags, SP4_NONE, no implementation ID
        a
    }

    fn channel(max_requests: u32) -> Vec<u8> {
        words(&[0, 4096, 4096, 0, 8, max_requests, 0])
    }

    fn create_session(id: u64, seq: u32) -> Vec<u8> {
        let mut a = id.to_be_bytes().to_vec();
        a.extend(words(&[seq, CONN_BACK_CHAN]));
        a.extend(channel(4));
        a.extend(channel(2));
        a.extend(words(&[0x4000_0000, 1, 0])); // program, one AUTH_NONE
        a
    }

    fn sequence(sid: &SessionId, seq: u32, slot: u32) -> Vec<u8> {
        let mut a = sid.to_vec();
        a.extend(words(&[seq, slot, 0, 0]));
        a
    }

    /// Runs `args`; the whole reply and its status.
    fn run(st: &mut State, args: &[u8]) -> (Vec<u8>, u32) {
        let mut out = vec![0u8; 4096];
        let m = std::sync::Mutex::new(std::mem::replace(st, State::new(0)));
        let n = crate::compound::run(&m, None, 7, args, &mut out, None).len;
        *st = m.into_inner().unwrap();
        out.truncate(n);
        let s = u32::from_be_bytes(out[..4].try_into().unwrap());
        (out, s)
    }

    /// A client ID and a session with its back channel.
    fn session(st: &mut State) -> (u64, SessionId) {
        let (r, s) = run(st, &compound(&[(op::EXCHANGE_ID, exchange_id(b"c1", 1))]));
        assert_eq!(s, status::OK);
        // Status, tag "t" (8 bytes), count, op, op status; the client ID and sequence.
        let id = u64::from_be_bytes(r[24..32].try_into().unwrap());
        let seq = u32::from_be_bytes(r[32..36].try_into().unwrap());
        let (r, s) = run(
            st,
            &compound(&[(op::CREATE_SESSION, create_session(id, seq))]),
        );
        assert_eq!(s, status::OK);
        (id, r[24..40].try_into().unwrap())
    }

    #[test]
    fn a_session_records_its_back_channel_on_the_connection() {
        let mut st = State::new(9);
        let (id, sid) = session(&mut st);
        assert_eq!(st.new_back_channels.len(), 1);
        let (bc, used) = st.back_channel(&sid).unwrap();
        assert!(!used);
        assert_eq!((bc.conn, bc.program, bc.flavor), (7, 0x4000_0000, 0));
        assert_eq!(&sid[..8], &id.to_be_bytes());
    }

    #[test]
    fn a_retransmitted_request_gets_the_same_reply_and_a_skipped_one_is_refused() {
        let mut st = State::new(9);
        let (_, sid) = session(&mut st);
        let req = compound(&[
            (op::SEQUENCE, sequence(&sid, 1, 0)),
            (op::RECLAIM_COMPLETE, words(&[0])),
        ]);
        let (first, s) = run(&mut st, &req);
        assert_eq!(s, status::OK);
        let (again, _) = run(&mut st, &req);
        assert_eq!(again, first, "a replay is answered from the slot's cache");
        let skip = compound(&[(op::SEQUENCE, sequence(&sid, 3, 0))]);
        assert_eq!(run(&mut st, &skip).1, status::SEQ_MISORDERED);
        let bad_slot = compound(&[(op::SEQUENCE, sequence(&sid, 1, 9))]);
        assert_eq!(run(&mut st, &bad_slot).1, status::BADSLOT);
        let next = compound(&[(op::SEQUENCE, sequence(&sid, 2, 0))]);
        assert_eq!(run(&mut st, &next).1, status::OK);
    }

    #[test]
    fn operations_out_of_place_or_unknown_are_refused() {
        let mut st = State::new(9);
        let (id, sid) = session(&mut st);
        // Not in a session.
        assert_eq!(
            run(&mut st, &compound(&[(op::RECLAIM_COMPLETE, words(&[0]))])).1,
            status::OP_NOT_IN_SESSION
        );
        // SEQUENCE past the first place.
        let two = compound(&[
            (op::SEQUENCE, sequence(&sid, 1, 0)),
            (op::SEQUENCE, sequence(&sid, 2, 0)),
        ]);
        assert_eq!(run(&mut st, &two).1, status::SEQUENCE_POS);
        // A file operation not implemented yet, and an operation number out of range.
        let putrootfh = compound(&[(op::SEQUENCE, sequence(&sid, 2, 0)), (24, Vec::new())]);
        assert_eq!(run(&mut st, &putrootfh).1, status::NOTSUPP);
        let (r, s) = run(
            &mut st,
            &compound(&[(op::SEQUENCE, sequence(&sid, 3, 0)), (9999, Vec::new())]),
        );
        assert_eq!(s, status::OP_ILLEGAL);
        assert_eq!(
            &r[r.len() - 8..],
            &words(&[op::ILLEGAL, status::OP_ILLEGAL])[..]
        );
        // The client ID is busy while its session lives; then both go.
        let destroy_client = compound(&[(op::DESTROY_CLIENTID, id.to_be_bytes().to_vec())]);
        assert_eq!(run(&mut st, &destroy_client).1, status::CLIENTID_BUSY);
        assert_eq!(
            run(&mut st, &compound(&[(op::DESTROY_SESSION, sid.to_vec())])).1,
            status::OK
        );
        assert!(st.back_channel(&sid).is_none());
        assert_eq!(run(&mut st, &destroy_client).1, status::OK);
        assert_eq!(
            run(&mut st, &compound(&[(op::SEQUENCE, sequence(&sid, 4, 0))])).1,
            status::BADSESSION
        );
        // Minor version 0 is not served.
        let mut v0 = compound(&[]);
        v0[8..12].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(run(&mut st, &v0).1, status::MINOR_VERS_MISMATCH);
    }

    #[test]
    fn create_session_replays_and_refuses_a_wrong_sequence() {
        let mut st = State::new(9);
        let (r, _) = run(
            &mut st,
            &compound(&[(op::EXCHANGE_ID, exchange_id(b"c2", 2))]),
        );
        let id = u64::from_be_bytes(r[24..32].try_into().unwrap());
        let seq = u32::from_be_bytes(r[32..36].try_into().unwrap());
        let req = compound(&[(op::CREATE_SESSION, create_session(id, seq))]);
        let (first, _) = run(&mut st, &req);
        let (again, _) = run(&mut st, &req);
        assert_eq!(again, first);
        assert_eq!(st.sessions(), 1);
        let wrong = compound(&[(op::CREATE_SESSION, create_session(id, seq + 5))]);
        assert_eq!(run(&mut st, &wrong).1, status::SEQ_MISORDERED);
        let stale = compound(&[(op::CREATE_SESSION, create_session(id ^ 1, seq))]);
        assert_eq!(run(&mut st, &stale).1, status::STALE_CLIENTID);
        // The same owner with a new verifier: a restarted client, its session gone.
        run(
            &mut st,
            &compound(&[(op::EXCHANGE_ID, exchange_id(b"c2", 3))]),
        );
        assert_eq!(st.sessions(), 0);
    }
}
