//! The host's functions that libpmix calls on its own thread (the server
//! module: a client connected or finalized, an abort, a fence, publish,
//! lookup and unpublish, connect, a rank lost), and the published names
//! they answer from. They touch only [`Shared`](super::Shared).

use super::*;

/// The world and rank of `proc_`, if it belongs to a registered namespace.
///
/// # Safety
/// `proc_` must be NULL or point at a `pmix_proc_t`.
unsafe fn whose(shared: &Shared, proc_: *const Proc) -> Option<(usize, usize)> {
    // SAFETY: as the caller promises.
    let proc_ = unsafe { proc_.as_ref() }?;
    let nspace = text_of_array(&proc_.nspace);
    let namespaces = shared.namespaces.lock().unwrap_or_else(|e| e.into_inner());
    let world = namespaces.iter().position(|ns| *ns == nspace)?;
    Some((world, proc_.rank as usize))
}

/// Queues `event` for scrun's loop and wakes it.
///
/// # Safety
/// `proc_` must be NULL or point at a `pmix_proc_t`.
unsafe fn report(proc_: *const Proc, event: RankEvent) {
    let Some(shared) = SHARED.get() else {
        return;
    };
    // SAFETY: as the caller promises.
    let Some((world, rank)) = (unsafe { whose(shared, proc_) }) else {
        return;
    };
    shared
        .events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(PmixEvent { world, rank, event });
    // A full pipe already wakes the loop.
    let _ = nix::unistd::write(&shared.wake, &[1]);
}

pub(super) unsafe extern "C" fn client_connected(
    proc_: *const Proc,
    _object: *mut c_void,
    cbfunc: Option<OpCb>,
    cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes its `pmix_proc_t`.
    unsafe { report(proc_, RankEvent::Connected) };
    if let Some(cbfunc) = cbfunc {
        // SAFETY: the library's callback with its own data.
        unsafe { cbfunc(PMIX_SUCCESS, cbdata) };
    }
    PMIX_SUCCESS
}

pub(super) unsafe extern "C" fn client_finalized(
    proc_: *const Proc,
    _object: *mut c_void,
    cbfunc: Option<OpCb>,
    cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes its `pmix_proc_t`.
    unsafe { report(proc_, RankEvent::Finalized) };
    if let Some(cbfunc) = cbfunc {
        // SAFETY: the library's callback with its own data.
        unsafe { cbfunc(PMIX_SUCCESS, cbdata) };
    }
    PMIX_SUCCESS
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn abort(
    proc_: *const Proc,
    _object: *mut c_void,
    status: c_int,
    msg: *const c_char,
    _procs: *mut Proc,
    _nprocs: usize,
    cbfunc: Option<OpCb>,
    cbdata: *mut c_void,
) -> Status {
    // OpenMPI says "N/A" for no message.
    let message = Some(text_of(msg))
        .filter(|m| !m.trim().is_empty() && m.trim() != "N/A")
        .map(|m| m.trim_end().chars().take(1024).collect());
    // SAFETY: the library passes its `pmix_proc_t`.
    unsafe { report(proc_, RankEvent::Aborted { status, message }) };
    if let Some(cbfunc) = cbfunc {
        // SAFETY: the library's callback with its own data: the rank is
        // released and exits; scrun kills the rest of the job.
        unsafe { cbfunc(PMIX_SUCCESS, cbdata) };
    }
    PMIX_SUCCESS
}

/// `MPI_Comm_spawn`: refused at once, and the job ended naming the rank.
pub(super) unsafe extern "C" fn spawn(
    proc_: *const Proc,
    _job_info: *const Info,
    _ninfo: usize,
    _apps: *const c_void,
    _napps: usize,
    _cbfunc: *mut c_void,
    _cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes its `pmix_proc_t`.
    unsafe { report(proc_, RankEvent::Spawned) };
    // Without calling back: the library answers the rank itself.
    PMIX_ERR_NOT_SUPPORTED
}

unsafe extern "C" fn release_blob(data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: a `Box<Vec<u8>>` leaked by `fence_nb`, released once.
        drop(unsafe { Box::from_raw(data.cast::<Vec<u8>>()) });
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn fence_nb(
    _procs: *const Proc,
    _nprocs: usize,
    _info: *const Info,
    _ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cbfunc: Option<ModexCb>,
    cbdata: *mut c_void,
) -> Status {
    // Every participant is a client of this server: the collective is
    // the data given. It is copied, as the library frees its own on return
    // and reads ours later, until it calls `release_blob`.
    let blob: Box<Vec<u8>> = Box::new(if data.is_null() || ndata == 0 {
        Vec::new()
    } else {
        // SAFETY: the library gives `ndata` bytes at `data`.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), ndata) }.to_vec()
    });
    let (ptr, len) = (blob.as_ptr().cast::<c_char>(), blob.len());
    let keep = Box::into_raw(blob).cast::<c_void>();
    if let Some(cbfunc) = cbfunc {
        // SAFETY: the library's callback with its own data; our copy
        // stays valid until it calls `release_blob` with `keep`.
        unsafe { cbfunc(PMIX_SUCCESS, ptr, len, cbdata, Some(release_blob), keep) };
    } else {
        // SAFETY: ours, not handed over.
        unsafe { release_blob(keep) };
    }
    PMIX_SUCCESS
}

/// The publisher of a request from `proc_`.
///
/// # Safety
/// `proc_` must be NULL or point at a `pmix_proc_t`.
unsafe fn publisher(shared: &Shared, proc_: *const Proc) -> Option<Publisher> {
    // SAFETY: as the caller promises.
    unsafe { whose(shared, proc_) }.map(|(world, rank)| Publisher { world, rank })
}

pub(super) unsafe extern "C" fn publish(
    proc_: *const Proc,
    info: *const Info,
    ninfo: usize,
    cbfunc: Option<OpCb>,
    cbdata: *mut c_void,
) -> Status {
    let Some(shared) = SHARED.get() else {
        return PMIX_ERR_NOT_FOUND;
    };
    let status = (|| {
        // SAFETY: the library passes its `pmix_proc_t`.
        let who = unsafe { publisher(shared, proc_) }?;
        let infos = if info.is_null() || ninfo == 0 {
            &[][..]
        } else {
            // SAFETY: the library gives `ninfo` infos at `info`.
            unsafe { std::slice::from_raw_parts(info, ninfo) }
        };
        let mut names = shared.names.lock().unwrap_or_else(|e| e.into_inner());
        for info in infos {
            let key = text_of_array(&info.key);
            // The library's own keys are directives (range, persistence,
            // the publisher's uid), not names.
            if key.starts_with("pmix.") {
                continue;
            }
            // SAFETY: a value the library built, read by its type.
            let Some(value) = (unsafe { Stored::of(&info.value) }) else {
                return Some(PMIX_ERR_NOT_SUPPORTED);
            };
            if let Err(error) = names.publish(who, &key, value) {
                return Some(match error {
                    NameError::Taken(_) => PMIX_ERR_DUPLICATE_KEY,
                    _ => PMIX_ERR_BAD_PARAM,
                });
            }
        }
        Some(PMIX_SUCCESS)
    })()
    .unwrap_or(PMIX_ERR_NOT_FOUND);
    if let Some(cbfunc) = cbfunc {
        // SAFETY: the library's callback with its own data.
        unsafe { cbfunc(status, cbdata) };
    }
    if status == PMIX_SUCCESS {
        answer_waiting(shared);
    }
    PMIX_SUCCESS
}

/// The strings of a NULL-terminated `char **`.
///
/// # Safety
/// `keys` must be NULL or a NULL-terminated array of C strings.
unsafe fn strings(keys: *mut *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if keys.is_null() {
        return out;
    }
    for idx in 0..4096 {
        // SAFETY: within the NULL-terminated array.
        let key = unsafe { *keys.add(idx) };
        if key.is_null() {
            break;
        }
        out.push(text_of(key));
    }
    out
}

/// A lookup that waits for its names to be published (`PMIX_WAIT`).
pub(super) struct Waiting {
    keys: Vec<String>,
    cbfunc: LookupCb,
    /// The library's `cbdata`, an address it keeps valid until answered.
    cbdata: usize,
}

/// The most lookups that may wait at once; one more is answered "not found".
const MAX_WAITING: usize = 1024;

/// Answers the lookup of `keys` if every one is published; false if not.
///
/// # Safety
/// `cbfunc` and `cbdata` must be the library's, not yet answered.
unsafe fn answer(shared: &Shared, keys: &[String], cbfunc: LookupCb, cbdata: *mut c_void) -> bool {
    let found: Vec<(String, Stored, Publisher)> = {
        let names = shared.names.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter_map(|key| {
                let (value, owner) = names.lookup_with_publisher(key)?;
                Some((key.clone(), value.clone(), owner))
            })
            .collect()
    };
    if found.len() < keys.len() || found.is_empty() {
        return false;
    }
    let namespaces = shared
        .namespaces
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut pdata: Vec<Pdata> = Vec::with_capacity(found.len());
    for (key, value, owner) in &found {
        // SAFETY: all-zero is a valid `pmix_pdata_t` (empty strings, an
        // undefined value).
        let mut pd: Pdata = unsafe { std::mem::zeroed() };
        fill(
            &mut pd.proc_.nspace,
            namespaces.get(owner.world).map_or("", String::as_str),
        );
        pd.proc_.rank = owner.rank as u32;
        fill(&mut pd.key, key);
        // SAFETY: `pd.value` is a zeroed value to load into.
        unsafe { value.load(&shared.fns, &mut pd.value) };
        pdata.push(pd);
    }
    // SAFETY: the library's callback with its own data; it packs the
    // data before it returns.
    unsafe { cbfunc(PMIX_SUCCESS, pdata.as_mut_ptr(), pdata.len(), cbdata) };
    for pd in &mut pdata {
        // SAFETY: loaded above, destroyed once.
        unsafe { (shared.fns.value_destruct)(&mut pd.value) };
    }
    true
}

/// Answers the waiting lookups whose names are all published now.
fn answer_waiting(shared: &Shared) {
    let waiting = std::mem::take(&mut *shared.waiting.lock().unwrap_or_else(|e| e.into_inner()));
    let mut still = Vec::new();
    for entry in waiting {
        // SAFETY: a lookup the library asked for and nobody answered yet.
        let answered = unsafe {
            answer(
                shared,
                &entry.keys,
                entry.cbfunc,
                entry.cbdata as *mut c_void,
            )
        };
        if !answered {
            still.push(entry);
        }
    }
    shared
        .waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(still);
}

/// Whether `infos` ask a lookup to wait for its names (`PMIX_WAIT`, an
/// int or a flag).
fn wants_wait(infos: &[Info]) -> bool {
    infos.iter().any(|info| {
        text_of_array(&info.key) == "pmix.wait"
            && (info.value.kind != PMIX_BOOL || info.value.data[0] & 0xff != 0)
    })
}

pub(super) unsafe extern "C" fn lookup(
    proc_: *const Proc,
    keys: *mut *mut c_char,
    info: *const Info,
    ninfo: usize,
    cbfunc: Option<LookupCb>,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERR_BAD_PARAM;
    };
    let Some(shared) = SHARED.get() else {
        return PMIX_ERR_NOT_FOUND;
    };
    // SAFETY: the library passes its `pmix_proc_t` and NULL-terminated keys.
    let (who, keys) = unsafe { (whose(shared, proc_), strings(keys)) };
    let infos = if info.is_null() || ninfo == 0 {
        &[][..]
    } else {
        // SAFETY: the library gives `ninfo` infos at `info`.
        unsafe { std::slice::from_raw_parts(info, ninfo) }
    };
    // SAFETY: the library's callback and data, answered once here or later.
    if who.is_some() && !keys.is_empty() && unsafe { answer(shared, &keys, cbfunc, cbdata) } {
        return PMIX_SUCCESS;
    }
    if who.is_some() && !keys.is_empty() && wants_wait(infos) {
        let mut waiting = shared.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.len() < MAX_WAITING {
            waiting.push(Waiting {
                keys,
                cbfunc,
                cbdata: cbdata as usize,
            });
            drop(waiting);
            // A publish may have come between the look and the queueing.
            answer_waiting(shared);
            return PMIX_SUCCESS;
        }
    }
    // SAFETY: the library's callback with its own data.
    unsafe { cbfunc(PMIX_ERR_NOT_FOUND, std::ptr::null_mut(), 0, cbdata) };
    PMIX_SUCCESS
}

/// A published value: a string or bytes, as PMIx typed it.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    kind: u16,
    bytes: Vec<u8>,
}

impl Port for Stored {
    fn size(&self) -> usize {
        self.bytes.len()
    }
}

/// `pmix_byte_object_t`.
#[repr(C)]
pub(super) struct ByteObject {
    bytes: *mut c_char,
    size: usize,
}

impl Stored {
    /// A copy of `value`, if it is a string or bytes.
    ///
    /// # Safety
    /// `value` must be a value the library built.
    unsafe fn of(value: &Value) -> Option<Stored> {
        match value.kind {
            PMIX_STRING => Some(Stored {
                kind: PMIX_STRING,
                bytes: text_of(value.data[0] as *const c_char).into_bytes(),
            }),
            PMIX_BYTE_OBJECT => {
                let (ptr, size) = (value.data[0] as *const u8, value.data[1] as usize);
                let bytes = if ptr.is_null() || size == 0 {
                    Vec::new()
                } else if size > NAME_LIMITS.port {
                    // Refused by the table's limit without copying it.
                    vec![0; NAME_LIMITS.port + 1]
                } else {
                    // SAFETY: a byte object's `size` bytes at `bytes`.
                    unsafe { std::slice::from_raw_parts(ptr, size) }.to_vec()
                };
                Some(Stored {
                    kind: PMIX_BYTE_OBJECT,
                    bytes,
                })
            }
            _ => None,
        }
    }

    /// Loads a copy into `value`, for the caller to destroy.
    ///
    /// # Safety
    /// `value` must be a zeroed or destroyed value.
    unsafe fn load(&self, fns: &Fns, value: &mut Value) {
        if self.kind == PMIX_STRING {
            let text = CString::new(self.bytes.clone()).unwrap_or_default();
            // SAFETY: a string value is loaded (copied) from its `char *`.
            unsafe { (fns.value_load)(value, text.as_ptr().cast(), PMIX_STRING) };
        } else {
            let object = ByteObject {
                bytes: self.bytes.as_ptr() as *mut c_char,
                size: self.bytes.len(),
            };
            // SAFETY: a byte object is loaded by copying its bytes, which
            // the library only reads.
            unsafe {
                (fns.value_load)(
                    value,
                    (&object as *const ByteObject).cast(),
                    PMIX_BYTE_OBJECT,
                )
            };
        }
    }
}

pub(super) unsafe extern "C" fn unpublish(
    proc_: *const Proc,
    keys: *mut *mut c_char,
    _info: *const Info,
    _ninfo: usize,
    cbfunc: Option<OpCb>,
    cbdata: *mut c_void,
) -> Status {
    let status = (|| {
        let shared = SHARED.get()?;
        // SAFETY: the library passes its `pmix_proc_t` and NULL-terminated keys.
        let (who, keys) = unsafe { (publisher(shared, proc_)?, strings(keys)) };
        let mut names = shared.names.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            if names.unpublish(who, &key).is_err() {
                return Some(PMIX_ERR_NOT_FOUND);
            }
        }
        Some(PMIX_SUCCESS)
    })()
    .unwrap_or(PMIX_ERR_NOT_FOUND);
    if let Some(cbfunc) = cbfunc {
        // SAFETY: the library's callback with its own data.
        unsafe { cbfunc(status, cbdata) };
    }
    PMIX_SUCCESS
}

pub(super) unsafe extern "C" fn connect(
    _procs: *const Proc,
    _nprocs: usize,
    _info: *const Info,
    _ninfo: usize,
    cbfunc: Option<OpCb>,
    cbdata: *mut c_void,
) -> Status {
    // Every process is a client of this server, which knows them all.
    if let Some(cbfunc) = cbfunc {
        // SAFETY: the library's callback with its own data.
        unsafe { cbfunc(PMIX_SUCCESS, cbdata) };
    }
    PMIX_SUCCESS
}

/// The event handler for a rank's connection lost without finalize: the
/// source, and any further ranks the library folded into one event.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn rank_lost(
    _id: usize,
    _status: Status,
    source: *const Proc,
    info: *mut Info,
    ninfo: usize,
    _results: *mut Info,
    _nresults: usize,
    cbfunc: Option<EventCb>,
    cbdata: *mut c_void,
) {
    // SAFETY: the library passes its `pmix_proc_t`.
    unsafe { report(source, RankEvent::Lost) };
    if !info.is_null() {
        // SAFETY: the library gives `ninfo` infos at `info`.
        for info in unsafe { std::slice::from_raw_parts(info, ninfo) } {
            if text_of_array(&info.key) == "pmix.procid" && info.value.kind == PMIX_PROC {
                // SAFETY: a PMIX_PROC value holds a `pmix_proc_t *`.
                unsafe { report(info.value.data[0] as *const Proc, RankEvent::Lost) };
            }
        }
    }
    if let Some(cbfunc) = cbfunc {
        // SAFETY: the library's callback with its own data.
        unsafe {
            cbfunc(
                PMIX_EVENT_ACTION_COMPLETE,
                std::ptr::null_mut(),
                0,
                None,
                std::ptr::null_mut(),
                cbdata,
            )
        };
    }
}

pub(super) const PMIX_PROC: u16 = 22;
