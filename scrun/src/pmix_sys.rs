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
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use scrun::pmi::names::{NameError, Names, Port, Publisher, NAME_LIMITS};
use scrun::pmi::pmix::{Attr, AttrValue, RankEvent};

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
    spawn: AnyFn,
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

    /// Starts the server, once per process: its files go to `tmpdir`, a
    /// directory of this user's, mode 0700.
    pub fn start(&'static self, tmpdir: &Path) -> Result<Server, String> {
        let (read, write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|errno| format!("cannot create a pipe: {}", errno.desc()))?;
        let shared = Shared {
            namespaces: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            names: Mutex::new(Names::new()),
            waiting: Mutex::new(Vec::new()),
            fns: self.fns,
            wake: write,
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
            spawn: None,
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
        Ok(Server {
            library: self,
            wake: read,
        })
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
    wake: OwnedFd,
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

    /// Becomes readable when [`Server::take_events`] has something.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// What the ranks did since the last call.
    pub fn take_events(&self) -> Vec<PmixEvent> {
        let mut sink = [0u8; 64];
        while matches!(nix::unistd::read(&self.wake, &mut sink), Ok(n) if n > 0) {}
        SHARED.get().map_or_else(Vec::new, |shared| {
            std::mem::take(&mut *shared.events.lock().unwrap_or_else(|e| e.into_inner()))
        })
    }
}

// The host's functions, called on the library's thread.

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

unsafe extern "C" fn client_connected(
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

unsafe extern "C" fn client_finalized(
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
unsafe extern "C" fn abort(
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

unsafe extern "C" fn release_blob(data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: a `Box<Vec<u8>>` leaked by `fence_nb`, released once.
        drop(unsafe { Box::from_raw(data.cast::<Vec<u8>>()) });
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn fence_nb(
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

unsafe extern "C" fn publish(
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
struct Waiting {
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

unsafe extern "C" fn lookup(
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
struct Stored {
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
struct ByteObject {
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

unsafe extern "C" fn unpublish(
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

unsafe extern "C" fn connect(
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
unsafe extern "C" fn rank_lost(
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

const PMIX_PROC: u16 = 22;

#[cfg(test)]
mod tests {
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
