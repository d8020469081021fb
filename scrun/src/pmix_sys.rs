//! The PMIx server library (libpmix, the PMIx reference implementation
//! the distribution ships), loaded at run time and wrapped once: the only
//! place besides [`crate::sys`] where scrun uses `unsafe`.
//!
//! Loaded with dlopen(3) when a job asks for PMIx, so that scrun builds,
//! and runs every other job, on a machine without it; [`Library::load`]
//! says what is missing. The few functions used are declared by hand, with
//! the layouts of PMIx 4's `pmix_proc_t`, `pmix_value_t`, `pmix_info_t`,
//! `pmix_pdata_t` and `pmix_data_array_t`, which the library keeps stable
//! across its 4.x and 5.x releases (a test compares them with the
//! installed headers when they are present).
//!
//! libpmix runs its own progress thread and calls the host's functions
//! (the server module) from it. Those functions here touch only
//! [`Shared`]: the published names (answered at once, under a mutex) and
//! a queue of [`PmixEvent`]s for scrun's loop, woken by a byte on a pipe.
//! Fences between ranks of this machine complete inside the library; the
//! fence function here answers the collective of the data it is given.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use scrun::pmi::names::{NameError, Names, Port, Publisher, NAME_LIMITS};
use scrun::pmi::pmix::{Attr, AttrValue, RankEvent, SERVER_RANK};

/// The library's file name: Debian's `libpmix2` (PMIx 4.2).
pub const LIBRARY: &str = "libpmix.so.2";

type Status = c_int;

const PMIX_SUCCESS: Status = 0;
const PMIX_ERR_NOT_SUPPORTED: Status = -47;
const PMIX_ERR_NOT_FOUND: Status = -46;
const PMIX_ERR_BAD_PARAM: Status = -27;
const PMIX_ERR_DUPLICATE_KEY: Status = -53;
const PMIX_ERR_LOST_CONNECTION: Status = -61;
const PMIX_ERR_PROC_TERM_WO_SYNC: Status = -200;
const PMIX_EVENT_ACTION_COMPLETE: Status = -334;

const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;
const PMIX_BYTE_OBJECT: u16 = 27;
const PMIX_UINT16: u16 = 13;
const PMIX_UINT32: u16 = 14;
const PMIX_DATA_ARRAY: u16 = 39;
const PMIX_PROC_RANK: u16 = 40;
const PMIX_INFO: u16 = 24;

const NSPACE_LEN: usize = 256;
const KEY_LEN: usize = 512;

/// `pmix_proc_t`.
#[repr(C)]
struct Proc {
    nspace: [c_char; NSPACE_LEN],
    rank: u32,
}

/// `pmix_value_t`: a type and a union of 24 bytes, 8-aligned.
#[repr(C)]
struct Value {
    kind: u16,
    data: [u64; 3],
}

/// `pmix_info_t`.
#[repr(C)]
struct Info {
    key: [c_char; KEY_LEN],
    flags: u32,
    value: Value,
}

/// `pmix_pdata_t`.
#[repr(C)]
struct Pdata {
    proc_: Proc,
    key: [c_char; KEY_LEN],
    value: Value,
}

/// `pmix_data_array_t`.
#[repr(C)]
struct DataArray {
    kind: u16,
    size: usize,
    array: *mut c_void,
}

type OpCb = unsafe extern "C" fn(Status, *mut c_void);
type ModexCb = unsafe extern "C" fn(
    Status,
    *const c_char,
    usize,
    *mut c_void,
    Option<unsafe extern "C" fn(*mut c_void)>,
    *mut c_void,
);
type LookupCb = unsafe extern "C" fn(Status, *mut Pdata, usize, *mut c_void);
type AnyFn = Option<unsafe extern "C" fn()>;

/// `pmix_server_module_t` of PMIx 4: the host's functions, NULL where
/// scrun offers none (the library then answers "not supported").
#[repr(C)]
struct Module {
    client_connected:
        Option<unsafe extern "C" fn(*const Proc, *mut c_void, Option<OpCb>, *mut c_void) -> Status>,
    client_finalized:
        Option<unsafe extern "C" fn(*const Proc, *mut c_void, Option<OpCb>, *mut c_void) -> Status>,
    abort: Option<
        unsafe extern "C" fn(
            *const Proc,
            *mut c_void,
            c_int,
            *const c_char,
            *mut Proc,
            usize,
            Option<OpCb>,
            *mut c_void,
        ) -> Status,
    >,
    fence_nb: Option<
        unsafe extern "C" fn(
            *const Proc,
            usize,
            *const Info,
            usize,
            *mut c_char,
            usize,
            Option<ModexCb>,
            *mut c_void,
        ) -> Status,
    >,
    direct_modex: AnyFn,
    publish: Option<
        unsafe extern "C" fn(*const Proc, *const Info, usize, Option<OpCb>, *mut c_void) -> Status,
    >,
    lookup: Option<
        unsafe extern "C" fn(
            *const Proc,
            *mut *mut c_char,
            *const Info,
            usize,
            Option<LookupCb>,
            *mut c_void,
        ) -> Status,
    >,
    unpublish: Option<
        unsafe extern "C" fn(
            *const Proc,
            *mut *mut c_char,
            *const Info,
            usize,
            Option<OpCb>,
            *mut c_void,
        ) -> Status,
    >,
    spawn: Option<
        unsafe extern "C" fn(
            *const Proc,
            *const Info,
            usize,
            *const c_void,
            usize,
            *mut c_void,
            *mut c_void,
        ) -> Status,
    >,
    connect: Option<
        unsafe extern "C" fn(
            *const Proc,
            usize,
            *const Info,
            usize,
            Option<OpCb>,
            *mut c_void,
        ) -> Status,
    >,
    disconnect: Option<
        unsafe extern "C" fn(
            *const Proc,
            usize,
            *const Info,
            usize,
            Option<OpCb>,
            *mut c_void,
        ) -> Status,
    >,
    /// The other 17 functions of the 4.x module, none offered.
    rest: [AnyFn; 17],
}

type EventCb = unsafe extern "C" fn(
    Status,
    *mut Info,
    usize,
    Option<unsafe extern "C" fn(*mut c_void)>,
    *mut c_void,
    *mut c_void,
);
type EventHandler = unsafe extern "C" fn(
    usize,
    Status,
    *const Proc,
    *mut Info,
    usize,
    *mut Info,
    usize,
    Option<EventCb>,
    *mut c_void,
);

/// The library's functions that scrun calls.
#[derive(Clone, Copy)]
struct Fns {
    server_init: unsafe extern "C" fn(*mut Module, *mut Info, usize) -> Status,
    register_nspace: unsafe extern "C" fn(
        *const c_char,
        c_int,
        *mut Info,
        usize,
        Option<OpCb>,
        *mut c_void,
    ) -> Status,
    register_client: unsafe extern "C" fn(
        *const Proc,
        libc::uid_t,
        libc::gid_t,
        *mut c_void,
        Option<OpCb>,
        *mut c_void,
    ) -> Status,
    setup_fork: unsafe extern "C" fn(*const Proc, *mut *mut *mut c_char) -> Status,
    register_event_handler: unsafe extern "C" fn(
        *mut Status,
        usize,
        *mut Info,
        usize,
        EventHandler,
        Option<unsafe extern "C" fn(Status, usize, *mut c_void)>,
        *mut c_void,
    ) -> Status,
    info_list_start: unsafe extern "C" fn() -> *mut c_void,
    info_list_add: unsafe extern "C" fn(*mut c_void, *const c_char, *const c_void, u16) -> Status,
    info_list_convert: unsafe extern "C" fn(*mut c_void, *mut DataArray) -> Status,
    info_list_release: unsafe extern "C" fn(*mut c_void),
    data_array_destruct: unsafe extern "C" fn(*mut DataArray),
    value_load: unsafe extern "C" fn(*mut Value, *const c_void, u16) -> Status,
    value_destruct: unsafe extern "C" fn(*mut Value),
    generate_regex: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> Status,
    generate_ppn: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
}

/// libpmix, loaded once and never unloaded (its thread and the functions
/// it calls back live as long as the process).
pub struct Library {
    fns: Fns,
}

/// A rank of a namespace did something (see [`RankEvent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmixEvent {
    /// The namespace's index in [`Server::register`] order (the stage).
    pub world: usize,
    /// The rank.
    pub rank: usize,
    /// What it did.
    pub event: RankEvent,
}

/// What the library's thread shares with scrun's loop.
struct Shared {
    /// The namespaces registered, in order: an event names its world by
    /// the index of its namespace here.
    namespaces: Mutex<Vec<String>>,
    events: Mutex<Vec<PmixEvent>>,
    names: Mutex<Names<Stored>>,
    /// Lookups waiting for names not yet published.
    waiting: Mutex<Vec<Waiting>>,
    fns: Fns,
    /// The write end of the wake-up pipe (non-blocking).
    wake: OwnedFd,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// Looks up `name` in `handle` as a function pointer of type `T`.
///
/// # Safety
/// `T` must be a function pointer type with the function's C signature.
unsafe fn symbol<T: Copy>(handle: *mut c_void, name: &str) -> Result<T, String> {
    let cname = CString::new(name).map_err(|_| format!("bad symbol name {name}"))?;
    // SAFETY: `handle` came from dlopen and is never closed; `cname` is a
    // NUL-terminated string that outlives the call.
    let ptr = unsafe { libc::dlsym(handle, cname.as_ptr()) };
    if ptr.is_null() {
        return Err(format!(
            "{LIBRARY} has no {name} (PMIx 4 or later is needed)"
        ));
    }
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: a non-null address of a function whose signature the caller
    // gives as `T`, a function pointer of the same size.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&ptr) })
}

/// A C string the library returned (static, or NULL), as text.
fn text_of(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: non-null, NUL-terminated, read at once.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The text of a fixed-size C array (a key or a namespace).
fn text_of_array(array: &[c_char]) -> String {
    let bytes: Vec<u8> = array
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copies `text` into a fixed-size C array, NUL-terminated, cut to fit.
fn fill(array: &mut [c_char], text: &str) {
    let room = array.len() - 1;
    for (slot, byte) in array.iter_mut().zip(text.bytes().take(room)) {
        *slot = byte as c_char;
    }
    array[text.len().min(room)] = 0;
}

fn ok(status: Status) -> bool {
    // PMIX_OPERATION_SUCCEEDED: done at once, no callback to come.
    status == PMIX_SUCCESS || status == -157
}

impl Library {
    /// Loads libpmix, or says why it cannot be had (not installed, too old).
    pub fn load() -> Result<&'static Library, String> {
        static LOADED: OnceLock<Result<Library, String>> = OnceLock::new();
        LOADED
            .get_or_init(|| {
                let name = CString::new(LIBRARY).expect("no NUL");
                // SAFETY: dlopen takes a NUL-terminated file name.
                let handle =
                    unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
                if handle.is_null() {
                    // SAFETY: dlerror returns a NUL-terminated message or NULL.
                    let why = text_of(unsafe { libc::dlerror() });
                    return Err(format!(
                        "cannot load {LIBRARY}, the PMIx library ({why}; on Debian: apt-get install libpmix2)"
                    ));
                }
                // SAFETY: each type is the C signature of the function of
                // that name in PMIx 4's pmix.h and pmix_server.h.
                let fns = unsafe {
                    Fns {
                        server_init: symbol(handle, "PMIx_server_init")?,
                        register_nspace: symbol(handle, "PMIx_server_register_nspace")?,
                        register_client: symbol(handle, "PMIx_server_register_client")?,
                        setup_fork: symbol(handle, "PMIx_server_setup_fork")?,
                        register_event_handler: symbol(handle, "PMIx_Register_event_handler")?,
                        info_list_start: symbol(handle, "PMIx_Info_list_start")?,
                        info_list_add: symbol(handle, "PMIx_Info_list_add")?,
                        info_list_convert: symbol(handle, "PMIx_Info_list_convert")?,
                        info_list_release: symbol(handle, "PMIx_Info_list_release")?,
                        data_array_destruct: symbol(handle, "PMIx_Data_array_destruct")?,
                        value_load: symbol(handle, "PMIx_Value_load")?,
                        value_destruct: symbol(handle, "PMIx_Value_destruct")?,
                        generate_regex: symbol(handle, "PMIx_generate_regex")?,
                        generate_ppn: symbol(handle, "PMIx_generate_ppn")?,
                        error_string: symbol(handle, "PMIx_Error_string")?,
                    }
                };
                Ok(Library { fns })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn describe(&self, status: Status) -> String {
        // SAFETY: PMIx_Error_string returns a static string for any status.
        let text = text_of(unsafe { (self.fns.error_string)(status) });
        if text.is_empty() {
            format!("status {status}")
        } else {
            text
        }
    }

    /// Starts the server, once per process, as namespace `nspace` (rank
    /// [`SERVER_RANK`]): its files go to `tmpdir`, a directory of this
    /// user's, mode 0700; a byte on `wake` (the write end of a
    /// non-blocking pipe) tells of what [`take_events`] has.
    pub fn start(
        &'static self,
        tmpdir: &Path,
        nspace: &str,
        wake: OwnedFd,
    ) -> Result<Server, String> {
        let shared = Shared {
            namespaces: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            names: Mutex::new(Names::new()),
            waiting: Mutex::new(Vec::new()),
            fns: self.fns,
            wake,
        };
        if SHARED.set(shared).is_err() {
            return Err("a PMIx server runs already in this process".to_string());
        }
        let dir = tmpdir
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", tmpdir.display()))?;
        let mut list = InfoList::new(&self.fns)?;
        list.add_str("pmix.srvr.tmpdir", dir)?;
        list.add_str("pmix.sys.tmpdir", dir)?;
        list.add_str("pmix.srv.nspace", nspace)?;
        list.add_attr(&Attr {
            key: "pmix.srv.rank",
            value: AttrValue::Rank(SERVER_RANK),
        })?;
        let mut array = list.convert()?;
        // The library keeps the module's address for the life of the
        // process.
        let module: &'static mut Module = Box::leak(Box::new(Module {
            client_connected: Some(client_connected),
            client_finalized: Some(client_finalized),
            abort: Some(abort),
            fence_nb: Some(fence_nb),
            direct_modex: None,
            publish: Some(publish),
            lookup: Some(lookup),
            unpublish: Some(unpublish),
            spawn: Some(spawn),
            connect: Some(connect),
            disconnect: Some(connect),
            rest: [None; 17],
        }));
        // SAFETY: `module` lives for ever; the array holds `size` infos
        // that the library built itself.
        let status =
            unsafe { (self.fns.server_init)(module, array.array.cast::<Info>(), array.size) };
        // SAFETY: built by PMIx_Info_list_convert, destroyed once.
        unsafe { (self.fns.data_array_destruct)(&mut array) };
        if !ok(status) {
            return Err(format!(
                "PMIx_server_init failed: {}",
                self.describe(status)
            ));
        }
        let mut codes = [PMIX_ERR_LOST_CONNECTION, PMIX_ERR_PROC_TERM_WO_SYNC];
        // SAFETY: `codes` is valid for the call, which copies it; without a
        // callback the registration completes before it returns.
        let status = unsafe {
            (self.fns.register_event_handler)(
                codes.as_mut_ptr(),
                codes.len(),
                std::ptr::null_mut(),
                0,
                rank_lost,
                None,
                std::ptr::null_mut(),
            )
        };
        if status < 0 {
            return Err(format!(
                "cannot register for the ranks' lost connections: {}",
                self.describe(status)
            ));
        }
        Ok(Server { library: self })
    }
}

/// A list of infos being built, released on drop.
struct InfoList<'a> {
    fns: &'a Fns,
    list: *mut c_void,
}

impl<'a> InfoList<'a> {
    fn new(fns: &'a Fns) -> Result<InfoList<'a>, String> {
        // SAFETY: returns a new list or NULL.
        let list = unsafe { (fns.info_list_start)() };
        if list.is_null() {
            return Err("PMIx_Info_list_start failed".to_string());
        }
        Ok(InfoList { fns, list })
    }

    /// Adds `key` with the value at `value` of PMIx type `kind`, which the
    /// library copies.
    ///
    /// # Safety
    /// `value` must point at a value of type `kind` as PMIx_Value_load
    /// reads it (a `char *` itself for a string).
    unsafe fn add(&mut self, key: &str, value: *const c_void, kind: u16) -> Result<(), String> {
        let ckey = CString::new(key).map_err(|_| format!("key {key:?} holds NUL"))?;
        // SAFETY: the list is live; the key is NUL-terminated; the value
        // is of `kind`, as the caller promises; the library copies both.
        let status = unsafe { (self.fns.info_list_add)(self.list, ckey.as_ptr(), value, kind) };
        if !ok(status) {
            return Err(format!("cannot add {key} to a PMIx info list ({status})"));
        }
        Ok(())
    }

    fn add_str(&mut self, key: &str, value: &str) -> Result<(), String> {
        let cvalue = CString::new(value).map_err(|_| format!("value of {key} holds NUL"))?;
        // SAFETY: a string value is its `char *`.
        unsafe { self.add(key, cvalue.as_ptr().cast(), PMIX_STRING) }
    }

    fn add_attr(&mut self, attr: &Attr) -> Result<(), String> {
        let key = attr.key;
        match &attr.value {
            AttrValue::U32(v) => {
                // SAFETY: a `u32` for PMIX_UINT32, alive for the call.
                unsafe { self.add(key, (v as *const u32).cast(), PMIX_UINT32) }
            }
            AttrValue::U16(v) => {
                // SAFETY: a `u16` for PMIX_UINT16, alive for the call.
                unsafe { self.add(key, (v as *const u16).cast(), PMIX_UINT16) }
            }
            AttrValue::Rank(v) => {
                // SAFETY: a `u32` (`pmix_rank_t`) for PMIX_PROC_RANK.
                unsafe { self.add(key, (v as *const u32).cast(), PMIX_PROC_RANK) }
            }
            AttrValue::Bool(v) => {
                // SAFETY: a `bool` (C's) for PMIX_BOOL, alive for the call.
                unsafe { self.add(key, (v as *const bool).cast(), PMIX_BOOL) }
            }
            AttrValue::Str(v) => self.add_str(key, v),
            AttrValue::NodeMap(input) => {
                let regex = generate(self.fns.generate_regex, input)?;
                self.add_str(key, &regex)
            }
            AttrValue::ProcMap(input) => {
                let regex = generate(self.fns.generate_ppn, input)?;
                self.add_str(key, &regex)
            }
            AttrValue::Infos(attrs) => {
                let mut inner = InfoList::new(self.fns)?;
                for attr in attrs {
                    inner.add_attr(attr)?;
                }
                let mut array = inner.convert()?;
                // SAFETY: a data array of infos; the library copies it.
                let added =
                    unsafe { self.add(key, (&array as *const DataArray).cast(), PMIX_DATA_ARRAY) };
                // SAFETY: built by PMIx_Info_list_convert, destroyed once.
                unsafe { (self.fns.data_array_destruct)(&mut array) };
                added
            }
        }
    }

    /// The list as an array of infos, for the caller to destroy.
    fn convert(self) -> Result<DataArray, String> {
        let mut array = DataArray {
            kind: PMIX_INFO,
            size: 0,
            array: std::ptr::null_mut(),
        };
        // SAFETY: the list is live; the array is written by the call.
        let status = unsafe { (self.fns.info_list_convert)(self.list, &mut array) };
        if !ok(status) {
            return Err(format!("cannot convert a PMIx info list ({status})"));
        }
        Ok(array)
    }
}

impl Drop for InfoList<'_> {
    fn drop(&mut self) {
        // SAFETY: the list came from PMIx_Info_list_start, released once.
        unsafe { (self.fns.info_list_release)(self.list) };
    }
}

/// A regular expression of libpmix's (`PMIx_generate_regex`, `_ppn`).
fn generate(
    function: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> Status,
    input: &str,
) -> Result<String, String> {
    let cinput = CString::new(input).map_err(|_| "a map holds NUL".to_string())?;
    let mut out: *mut c_char = std::ptr::null_mut();
    // SAFETY: the input is NUL-terminated; the output is a malloc'ed
    // string the library writes, freed below.
    let status = unsafe { function(cinput.as_ptr(), &mut out) };
    if !ok(status) || out.is_null() {
        return Err(format!("cannot build a PMIx map of {input:?} ({status})"));
    }
    let text = text_of(out);
    // SAFETY: malloc'ed by the library for us.
    unsafe { libc::free(out.cast()) };
    Ok(text)
}

/// The PMIx server of this process, with the namespaces it registered.
///
/// It is never finalized: it serves until scrun exits, which closes its
/// connections with the process. `PMIx_server_finalize` can wait for ever
/// on a lock of libpmix 4.2 left taken by a client it refused (another
/// user's, whose credentials did not match), and nothing it frees or
/// closes outlives the process; its files go with their directory
/// (`crate::pmix_server`).
pub struct Server {
    library: &'static Library,
}

impl Server {
    fn proc_of(nspace: &str, rank: u32) -> Proc {
        let mut proc_ = Proc {
            nspace: [0; NSPACE_LEN],
            rank,
        };
        fill(&mut proc_.nspace, nspace);
        proc_
    }

    /// Registers namespace `nspace` of `ranks` ranks with `attrs`, and its
    /// ranks as clients of this user; returns its world index.
    pub fn register(&self, nspace: &str, ranks: u32, attrs: &[Attr]) -> Result<usize, String> {
        let fns = &self.library.fns;
        let shared = SHARED.get().ok_or("the PMIx server is not started")?;
        if nspace.len() >= NSPACE_LEN {
            return Err(format!("namespace {nspace} is too long"));
        }
        let world = {
            let mut namespaces = shared.namespaces.lock().unwrap_or_else(|e| e.into_inner());
            namespaces.push(nspace.to_string());
            namespaces.len() - 1
        };
        let mut list = InfoList::new(fns)?;
        for attr in attrs {
            list.add_attr(attr)?;
        }
        let mut array = list.convert()?;
        // A `pmix_nspace_t`: the library may read all of its bytes.
        let mut cnspace = [0 as c_char; NSPACE_LEN];
        fill(&mut cnspace, nspace);
        let nlocal = c_int::try_from(ranks).unwrap_or(c_int::MAX);
        // SAFETY: the namespace is NUL-terminated, the array holds `size`
        // infos; without a callback the call completes before it returns,
        // and the library does not keep the array.
        let status = unsafe {
            (fns.register_nspace)(
                cnspace.as_ptr(),
                nlocal,
                array.array.cast::<Info>(),
                array.size,
                None,
                std::ptr::null_mut(),
            )
        };
        // SAFETY: built by PMIx_Info_list_convert, destroyed once.
        unsafe { (fns.data_array_destruct)(&mut array) };
        if !ok(status) {
            return Err(format!(
                "cannot register PMIx namespace {nspace}: {}",
                self.library.describe(status)
            ));
        }
        let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
        for rank in 0..ranks {
            let proc_ = Server::proc_of(nspace, rank);
            // SAFETY: `proc_` is valid for the call, which copies it; the
            // call completes before it returns without a callback.
            let status = unsafe {
                (fns.register_client)(
                    &proc_,
                    uid.as_raw(),
                    gid.as_raw(),
                    std::ptr::null_mut(),
                    None,
                    std::ptr::null_mut(),
                )
            };
            if !ok(status) {
                return Err(format!(
                    "cannot register rank {rank} of PMIx namespace {nspace}: {}",
                    self.library.describe(status)
                ));
            }
        }
        Ok(world)
    }

    /// The environment libpmix gives rank `rank` of `nspace` to find this
    /// server (`PMIx_server_setup_fork`): only the variables it adds.
    pub fn fork_env(&self, nspace: &str, rank: u32) -> Result<Vec<(OsString, OsString)>, String> {
        let proc_ = Server::proc_of(nspace, rank);
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: `proc_` is valid; `env` starts as an empty (NULL) argv
        // array that the library extends with malloc'ed strings.
        let status = unsafe { (self.library.fns.setup_fork)(&proc_, &mut env) };
        let mut out = Vec::new();
        if !env.is_null() {
            let mut idx = 0;
            loop {
                // SAFETY: a NULL-terminated array of malloc'ed strings.
                let entry = unsafe { *env.add(idx) };
                if entry.is_null() {
                    break;
                }
                // SAFETY: a NUL-terminated string of the array.
                let bytes = unsafe { CStr::from_ptr(entry) }.to_bytes().to_vec();
                if let Some(eq) = bytes.iter().position(|&b| b == b'=') {
                    out.push((
                        OsString::from_vec(bytes[..eq].to_vec()),
                        OsString::from_vec(bytes[eq + 1..].to_vec()),
                    ));
                }
                // SAFETY: malloc'ed by the library for us, freed once.
                unsafe { libc::free(entry.cast()) };
                idx += 1;
            }
            // SAFETY: the array itself was malloc'ed too.
            unsafe { libc::free(env.cast()) };
        }
        if !ok(status) {
            return Err(format!(
                "PMIx_server_setup_fork failed: {}",
                self.library.describe(status)
            ));
        }
        Ok(out)
    }
}

/// What the ranks did since the last call (none before the server
/// started).
pub fn take_events() -> Vec<PmixEvent> {
    SHARED.get().map_or_else(Vec::new, |shared| {
        std::mem::take(&mut *shared.events.lock().unwrap_or_else(|e| e.into_inner()))
    })
}

// The host's functions, called on the library's thread.
mod host;
use host::{
    abort, client_connected, client_finalized, connect, fence_nb, lookup, publish, rank_lost,
    spawn, unpublish, Stored, Waiting,
};

#[cfg(test)]
mod tests {
    use super::host::{ByteObject, PMIX_PROC};
    use super::*;

    /// The hand-written layouts match the installed headers, where a C
    /// compiler and libpmix-dev are present.
    #[test]
    fn the_layouts_match_the_installed_headers() {
        let include = Path::new("/usr/lib/x86_64-linux-gnu/pmix2/include/pmix_server.h");
        if !include.exists() {
            eprintln!("skipped: no PMIx headers (apt-get install libpmix-dev)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("scrun-pmix-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("probe.c");
        std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <stddef.h>
#include <pmix_server.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu\n", sizeof(pmix_proc_t), sizeof(pmix_value_t),
           offsetof(pmix_value_t, data), sizeof(pmix_info_t), offsetof(pmix_info_t, value),
           sizeof(pmix_pdata_t), offsetof(pmix_pdata_t, value), sizeof(pmix_data_array_t),
           sizeof(pmix_server_module_t));
    printf("%d %d %d %d %d %d %d %d %d %zu\n", PMIX_BOOL, PMIX_STRING, PMIX_UINT16, PMIX_UINT32,
           PMIX_DATA_ARRAY, PMIX_PROC_RANK, PMIX_INFO, PMIX_PROC, PMIX_BYTE_OBJECT,
           sizeof(pmix_byte_object_t));
    printf("%d %d %d %d %d %d %d\n", PMIX_ERR_NOT_SUPPORTED, PMIX_ERR_NOT_FOUND,
           PMIX_ERR_BAD_PARAM, PMIX_ERR_DUPLICATE_KEY, PMIX_ERR_LOST_CONNECTION,
           PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_EVENT_ACTION_COMPLETE);
    return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.join("probe");
        let built = std::process::Command::new("cc")
            .arg("-I/usr/lib/x86_64-linux-gnu/pmix2/include")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status();
        if !built.is_ok_and(|s| s.success()) {
            eprintln!("skipped: no C compiler for the PMIx headers");
            return;
        }
        let out = std::process::Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let ours = format!(
            "{} {} {} {} {} {} {} {} {}\n{} {} {} {} {} {} {} {} {} {}\n{} {} {} {} {} {} {}\n",
            std::mem::size_of::<Proc>(),
            std::mem::size_of::<Value>(),
            std::mem::offset_of!(Value, data),
            std::mem::size_of::<Info>(),
            std::mem::offset_of!(Info, value),
            std::mem::size_of::<Pdata>(),
            std::mem::offset_of!(Pdata, value),
            std::mem::size_of::<DataArray>(),
            std::mem::size_of::<Module>(),
            PMIX_BOOL,
            PMIX_STRING,
            PMIX_UINT16,
            PMIX_UINT32,
            PMIX_DATA_ARRAY,
            PMIX_PROC_RANK,
            PMIX_INFO,
            PMIX_PROC,
            PMIX_BYTE_OBJECT,
            std::mem::size_of::<ByteObject>(),
            PMIX_ERR_NOT_SUPPORTED,
            PMIX_ERR_NOT_FOUND,
            PMIX_ERR_BAD_PARAM,
            PMIX_ERR_DUPLICATE_KEY,
            PMIX_ERR_LOST_CONNECTION,
            PMIX_ERR_PROC_TERM_WO_SYNC,
            PMIX_EVENT_ACTION_COMPLETE,
        );
        assert_eq!(ours, text);
    }
}
