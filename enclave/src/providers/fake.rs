//! Faithful stand-ins for the three kernel interfaces, for tests. None of
//! them touches a device: [`FakeNsm`] answers NSM CBOR requests the way the
//! NSM does, [`FakeSevGuest`] answers the sev-guest ioctl structures the way
//! the driver and firmware do, [`FakeTsm`] is a temporary directory laid
//! out like configfs-tsm whose `inblob` writes produce a quote. Each starts
//! from genuine evidence bytes (a sample document, report or quote) and
//! only writes the request's fields into it, so the providers' parsers see
//! real layouts. Faults are queued per call to exercise the error paths.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ciborium::Value;

use super::nitro::{NsmDevice, decode_exact, encode_variant, field, map_fields};
use super::snp::{
    GuestRequestError, PAGE_SIZE, SNP_GUEST_VMM_ERR_BUSY, SNP_GUEST_VMM_ERR_INVALID_LEN,
    SNP_REPORT_LEN, SevGuestDevice, SnpExtReportReq, SnpReportReq, SnpReportResp,
};
use super::tdx::TsmFs;
use super::{ProviderError, REPORT_DATA_LEN};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A test panicking while holding the lock leaves the data usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

// ---------------------------------------------------------------- Nitro

/// A fault the fake NSM injects into one call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NsmFault {
    /// The ioctl fails with this errno.
    Errno(i32),
    /// The response is cut to this many bytes.
    Truncate(usize),
    /// The response gets these bytes appended.
    Append(Vec<u8>),
    /// `{"Error": code}`.
    ErrorCode(String),
    /// The document's `user_data` is replaced by these bytes.
    UserData(Vec<u8>),
    /// The document's `nonce` is replaced by these bytes.
    Nonce(Vec<u8>),
    /// The template document is returned unchanged (genuine bytes).
    Template,
}

/// The NSM: answers `DescribePCR` and `Attestation` from a template
/// document, writing the request's `user_data`, `nonce` and `public_key`
/// into its payload (COSE protected header and signature kept as they are).
#[derive(Debug)]
pub struct FakeNsm {
    path: PathBuf,
    template: Vec<u8>,
    pcr0: Vec<u8>,
    pcr0_locked: bool,
    faults: Mutex<VecDeque<Option<NsmFault>>>,
    requests: Mutex<Vec<Vec<u8>>>,
}

impl FakeNsm {
    /// A fake whose PCR0 is the template document's.
    pub fn new(template: Vec<u8>) -> Result<FakeNsm, ProviderError> {
        let doc = super::nitro::NitroDocument::parse(&template)?;
        Ok(FakeNsm {
            path: PathBuf::from("/dev/nsm (fake)"),
            template,
            pcr0: doc.pcr0.to_vec(),
            pcr0_locked: true,
            faults: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
        })
    }

    /// Overrides what `DescribePCR` reports.
    pub fn with_pcr0(mut self, pcr0: Vec<u8>, locked: bool) -> FakeNsm {
        self.pcr0 = pcr0;
        self.pcr0_locked = locked;
        self
    }

    /// Queues faults for the next calls, in order (`None`: a normal call).
    pub fn push_faults(&self, faults: impl IntoIterator<Item = Option<NsmFault>>) {
        lock(&self.faults).extend(faults);
    }

    /// The raw requests received so far.
    pub fn requests(&self) -> Vec<Vec<u8>> {
        lock(&self.requests).clone()
    }

    fn document(&self, user_data: Value, nonce: Value, public_key: Value) -> io::Result<Vec<u8>> {
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        let cose = decode_exact(&self.template, "template").map_err(|e| invalid(&e.to_string()))?;
        let (tag, items) = match cose {
            Value::Tag(t, inner) => match *inner {
                Value::Array(items) => (Some(t), items),
                _ => return Err(invalid("template")),
            },
            Value::Array(items) => (None, items),
            _ => return Err(invalid("template")),
        };
        let [protected, unprotected, Value::Bytes(payload), signature] =
            <[Value; 4]>::try_from(items).map_err(|_| invalid("template"))?
        else {
            return Err(invalid("template"));
        };
        let mut fields =
            match decode_exact(&payload, "payload").map_err(|e| invalid(&e.to_string()))? {
                Value::Map(f) => f,
                _ => return Err(invalid("payload")),
            };
        use kolm_tee_layouts::nitro::document as keys;
        for (name, value) in [
            (keys::USER_DATA, user_data),
            (keys::NONCE, nonce),
            (keys::PUBLIC_KEY, public_key),
        ] {
            match fields.iter_mut().find(|(k, _)| k.as_text() == Some(name)) {
                Some((_, v)) => *v = value,
                None => fields.push((Value::Text(name.into()), value)),
            }
        }
        let mut payload = Vec::new();
        ciborium::ser::into_writer(&Value::Map(fields), &mut payload)
            .map_err(|e| invalid(&e.to_string()))?;
        let array = Value::Array(vec![
            protected,
            unprotected,
            Value::Bytes(payload),
            signature,
        ]);
        let out = match tag {
            Some(t) => Value::Tag(t, Box::new(array)),
            None => array,
        };
        let mut bytes = Vec::new();
        ciborium::ser::into_writer(&out, &mut bytes).map_err(|e| invalid(&e.to_string()))?;
        Ok(bytes)
    }

    fn respond(&self, request: &[u8], fault: Option<&NsmFault>) -> io::Result<Vec<u8>> {
        let invalid = || errno(libc::EINVAL);
        let value = decode_exact(request, "request").map_err(|_| invalid())?;
        let fields = map_fields(value, "request").map_err(|_| invalid())?;
        let [(name, body)] = <[(String, Value); 1]>::try_from(fields).map_err(|_| invalid())?;
        let body = map_fields(body, "request body").map_err(|_| invalid())?;
        let response = |name: &str, fields: Vec<(&str, Value)>| {
            encode_variant(name, fields, "NSM response").map_err(|_| invalid())
        };
        if let Some(NsmFault::ErrorCode(code)) = fault {
            let mut out = Vec::new();
            let v = Value::Map(vec![(
                Value::Text("Error".into()),
                Value::Text(code.clone()),
            )]);
            ciborium::ser::into_writer(&v, &mut out).map_err(|_| invalid())?;
            return Ok(out);
        }
        match name.as_str() {
            "DescribePCR" => {
                if field(&body, "index").and_then(Value::as_integer) != Some(0.into()) {
                    let mut out = Vec::new();
                    let v = Value::Map(vec![(
                        Value::Text("Error".into()),
                        Value::Text("InvalidIndex".into()),
                    )]);
                    ciborium::ser::into_writer(&v, &mut out).map_err(|_| invalid())?;
                    return Ok(out);
                }
                response(
                    "DescribePCR",
                    vec![
                        ("lock", Value::Bool(self.pcr0_locked)),
                        ("data", Value::Bytes(self.pcr0.clone())),
                    ],
                )
            }
            kolm_tee_layouts::nitro::attestation_request::REQUEST => {
                use kolm_tee_layouts::nitro::attestation_request as req;
                let get = |n| field(&body, n).cloned().unwrap_or(Value::Null);
                let (mut user_data, mut nonce) = (get(req::USER_DATA), get(req::NONCE));
                match fault {
                    Some(NsmFault::UserData(b)) => user_data = Value::Bytes(b.clone()),
                    Some(NsmFault::Nonce(b)) => nonce = Value::Bytes(b.clone()),
                    _ => {}
                }
                let document = if fault == Some(&NsmFault::Template) {
                    self.template.clone()
                } else {
                    self.document(user_data, nonce, get(req::PUBLIC_KEY))?
                };
                response(
                    req::REQUEST,
                    vec![(req::RESPONSE_DOCUMENT, Value::Bytes(document))],
                )
            }
            _ => invalid_response(),
        }
    }
}

fn invalid_response() -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let v = Value::Map(vec![(
        Value::Text("Error".into()),
        Value::Text("InvalidOperation".into()),
    )]);
    ciborium::ser::into_writer(&v, &mut out)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    Ok(out)
}

impl NsmDevice for FakeNsm {
    fn path(&self) -> &Path {
        &self.path
    }

    fn raw(&self, request: &[u8], response: &mut [u8]) -> io::Result<usize> {
        lock(&self.requests).push(request.to_vec());
        let fault = lock(&self.faults).pop_front().flatten();
        if let Some(NsmFault::Errno(e)) = fault {
            return Err(errno(e));
        }
        let mut out = self.respond(request, fault.as_ref())?;
        match &fault {
            Some(NsmFault::Truncate(n)) => out.truncate(*n),
            Some(NsmFault::Append(b)) => out.extend_from_slice(b),
            _ => {}
        }
        // The driver refuses a response larger than the user's buffer.
        let dst = response
            .get_mut(..out.len())
            .ok_or_else(|| errno(libc::EMSGSIZE))?;
        dst.copy_from_slice(&out);
        Ok(out.len())
    }
}

// ---------------------------------------------------------------- SEV-SNP

/// A fault the fake sev-guest device injects into one ioctl.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnpFault {
    /// The ioctl fails with this errno and `exitinfo2`.
    Fail { errno: i32, exitinfo2: u64 },
    /// Throttled, as kernels before the in-driver retry reported it.
    VmmBusy,
    /// `MSG_REPORT_RSP.STATUS` is this value.
    Status(u32),
    /// `MSG_REPORT_RSP.REPORT_SIZE` is this value.
    ReportSize(u32),
    /// The report carries this report data instead of the request's.
    ReportData([u8; REPORT_DATA_LEN]),
    /// The report says this VMPL instead of the requested one.
    Vmpl(u32),
    /// A non-zero byte after the report in the response buffer.
    TrailingByte,
    /// The template report is returned unchanged (genuine bytes).
    Template,
}

/// The sev-guest driver and firmware: reports from a template with the
/// request's report data and VMPL written in; the extended request returns
/// the configured certificate table, or `EIO` with `INVALID_LEN` and the
/// needed length in `certs_len` when the buffer is too small, as the kernel
/// does. Certificate buffers must be page multiples (else `EINVAL`).
#[derive(Debug)]
pub struct FakeSevGuest {
    path: PathBuf,
    template: Vec<u8>,
    /// `None`: `SNP_GET_EXT_REPORT` is unknown (`ENOTTY`).
    certs: Option<Vec<([u8; 16], Vec<u8>)>>,
    faults: Mutex<VecDeque<Option<SnpFault>>>,
    calls: Mutex<Vec<(&'static str, usize)>>,
}

impl FakeSevGuest {
    /// `template`: a genuine report. `certs`: the host's
    /// certificate table entries (empty: the host supplies none; `None`:
    /// a kernel without `SNP_GET_EXT_REPORT`).
    pub fn new(template: Vec<u8>, certs: Option<Vec<([u8; 16], Vec<u8>)>>) -> FakeSevGuest {
        FakeSevGuest {
            path: PathBuf::from("/dev/sev-guest (fake)"),
            template,
            certs,
            faults: Mutex::new(VecDeque::new()),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Queues faults for the next ioctls, in order (`None`: a normal call).
    pub fn push_faults(&self, faults: impl IntoIterator<Item = Option<SnpFault>>) {
        lock(&self.faults).extend(faults);
    }

    /// `(ioctl name, certificate buffer length)` of every call so far.
    pub fn calls(&self) -> Vec<(&'static str, usize)> {
        lock(&self.calls).clone()
    }

    /// The certificate buffer the host writes: table, terminator, data;
    /// rounded up to whole pages.
    pub fn cert_blob(entries: &[([u8; 16], Vec<u8>)]) -> Vec<u8> {
        let table_len = (entries.len() + 1) * 24;
        let mut data_at = table_len;
        let mut out = vec![0u8; table_len];
        for (i, (g, data)) in entries.iter().enumerate() {
            let at = i * 24;
            out[at..at + 16].copy_from_slice(g);
            out[at + 16..at + 20].copy_from_slice(&(data_at as u32).to_le_bytes());
            out[at + 20..at + 24].copy_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
            data_at += data.len();
        }
        let len = out.len().next_multiple_of(PAGE_SIZE);
        out.resize(len, 0);
        out
    }

    fn fill(
        &self,
        req: &SnpReportReq,
        resp: &mut SnpReportResp,
        fault: Option<&SnpFault>,
    ) -> Result<(), GuestRequestError> {
        let fail = |errno, exitinfo2| GuestRequestError { errno, exitinfo2 };
        match fault {
            Some(SnpFault::Fail { errno, exitinfo2 }) => return Err(fail(*errno, *exitinfo2)),
            Some(SnpFault::VmmBusy) => {
                return Err(fail(libc::EIO, u64::from(SNP_GUEST_VMM_ERR_BUSY) << 32));
            }
            _ => {}
        }
        if req.rsvd != [0; 28] || req.vmpl > 3 {
            // Firmware: INVALID_PARAM.
            return Err(fail(libc::EIO, 0x16));
        }
        let mut report = self.template.clone();
        if report.len() != SNP_REPORT_LEN {
            return Err(fail(libc::EIO, 0));
        }
        if fault != Some(&SnpFault::Template) {
            let rd = match fault {
                Some(SnpFault::ReportData(d)) => *d,
                _ => req.user_data,
            };
            let vmpl = match fault {
                Some(SnpFault::Vmpl(v)) => *v,
                _ => req.vmpl,
            };
            use kolm_tee_layouts::snp::report as layout;
            report[layout::REPORT_DATA.range()].copy_from_slice(&rd);
            report[layout::VMPL.range()].copy_from_slice(&vmpl.to_le_bytes());
        }
        resp.data = [0; super::snp::SNP_RESP_DATA_LEN];
        let status = match fault {
            Some(SnpFault::Status(s)) => *s,
            _ => 0,
        };
        let size = match fault {
            Some(SnpFault::ReportSize(s)) => *s,
            _ => SNP_REPORT_LEN as u32,
        };
        use kolm_tee_layouts::snp::msg_report_rsp as rsp;
        resp.data[rsp::STATUS.range()].copy_from_slice(&status.to_le_bytes());
        resp.data[rsp::REPORT_SIZE.range()].copy_from_slice(&size.to_le_bytes());
        resp.data[rsp::REPORT.range()].copy_from_slice(&report);
        if fault == Some(&SnpFault::TrailingByte) {
            resp.data[rsp::SIZE] = 1;
        }
        Ok(())
    }
}

impl SevGuestDevice for FakeSevGuest {
    fn path(&self) -> &Path {
        &self.path
    }

    fn get_report(
        &self,
        req: &SnpReportReq,
        resp: &mut SnpReportResp,
    ) -> Result<(), GuestRequestError> {
        lock(&self.calls).push(("SNP_GET_REPORT", 0));
        let fault = lock(&self.faults).pop_front().flatten();
        self.fill(req, resp, fault.as_ref())
    }

    fn get_ext_report(
        &self,
        req: &mut SnpExtReportReq,
        resp: &mut SnpReportResp,
        certs: &mut [u8],
    ) -> Result<(), GuestRequestError> {
        lock(&self.calls).push(("SNP_GET_EXT_REPORT", certs.len()));
        let Some(entries) = &self.certs else {
            return Err(GuestRequestError {
                errno: libc::ENOTTY,
                exitinfo2: 0,
            });
        };
        let fault = lock(&self.faults).pop_front().flatten();
        req.certs_len = certs.len() as u32;
        if !certs.len().is_multiple_of(PAGE_SIZE) {
            return Err(GuestRequestError {
                errno: libc::EINVAL,
                exitinfo2: 0,
            });
        }
        if let Some(SnpFault::Fail { .. } | SnpFault::VmmBusy) = fault {
            return self.fill(&req.data, resp, fault.as_ref());
        }
        if certs.is_empty() {
            return self.fill(&req.data, resp, fault.as_ref());
        }
        let blob = if entries.is_empty() {
            Vec::new()
        } else {
            FakeSevGuest::cert_blob(entries)
        };
        if blob.len() > certs.len() {
            req.certs_len = blob.len() as u32;
            return Err(GuestRequestError {
                errno: libc::EIO,
                exitinfo2: u64::from(SNP_GUEST_VMM_ERR_INVALID_LEN) << 32,
            });
        }
        self.fill(&req.data, resp, fault.as_ref())?;
        certs.fill(0);
        certs[..blob.len()].copy_from_slice(&blob);
        Ok(())
    }
}

// ---------------------------------------------------------------- TDX

/// A fault the fake configfs-tsm injects.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TsmFault {
    /// `provider` reads this text.
    Provider(String),
    /// Another writer writes `inblob` right after ours.
    ConcurrentWrite,
    /// Reading `outblob` fails with `EBUSY` this many times.
    BusyOutblob(u32),
    /// `outblob` is cut to this many bytes.
    TruncateOutblob(usize),
    /// `outblob` gets these bytes appended.
    AppendOutblob(Vec<u8>),
    /// The quote carries this report data instead of `inblob`.
    ReportData([u8; REPORT_DATA_LEN]),
    /// `rmdir` fails with `EBUSY`.
    RmdirFails,
}

/// Produces a quote for an `inblob`.
pub type QuoteFn = Box<dyn Fn(&[u8]) -> Vec<u8> + Send + Sync>;

/// A temporary directory laid out like `/sys/kernel/config/tsm/report`:
/// `mkdir` creates the attribute files (`inblob`, `outblob`, `auxblob`,
/// `provider`, `generation`, `privlevel`, `privlevel_floor`), each write to
/// `inblob` increments `generation` and regenerates `outblob` from the new
/// `inblob`, `rmdir` removes the directory with them. The kernel's
/// attributes are virtual; here they are real files the fake keeps
/// consistent after each operation.
pub struct FakeTsm {
    dir: tempfile::TempDir,
    provider: Mutex<String>,
    quote: QuoteFn,
    faults: Mutex<Vec<TsmFault>>,
    created: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for FakeTsm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeTsm")
            .field("root", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl FakeTsm {
    /// A `tdx_guest` report root whose quotes come from `quote`.
    pub fn new(quote: QuoteFn) -> io::Result<FakeTsm> {
        Ok(FakeTsm {
            dir: tempfile::tempdir()?,
            provider: Mutex::new(super::tdx::TDX_PROVIDER.to_string()),
            quote,
            faults: Mutex::new(Vec::new()),
            created: Mutex::new(Vec::new()),
        })
    }

    /// The report root to hand the provider.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Adds a standing fault.
    pub fn add_fault(&self, fault: TsmFault) {
        if let TsmFault::Provider(p) = &fault {
            *lock(&self.provider) = p.clone();
        }
        lock(&self.faults).push(fault);
    }

    /// Report directories created so far.
    pub fn created(&self) -> Vec<PathBuf> {
        lock(&self.created).clone()
    }

    fn has(&self, f: impl Fn(&TsmFault) -> bool) -> bool {
        lock(&self.faults).iter().any(f)
    }

    /// Applies one `inblob` write the way the kernel does: store the blob,
    /// bump `generation`, regenerate `outblob`.
    fn commit_inblob(&self, dir: &Path, bytes: &[u8]) -> io::Result<()> {
        if bytes.len() > REPORT_DATA_LEN {
            return Err(errno(libc::EINVAL));
        }
        std::fs::write(dir.join("inblob"), bytes)?;
        let generation: u64 = std::fs::read_to_string(dir.join("generation"))?
            .trim_end()
            .parse()
            .map_err(|_| errno(libc::EINVAL))?;
        std::fs::write(dir.join("generation"), format!("{}\n", generation + 1))?;
        // The kernel zero-pads a short inblob to 64 bytes.
        let mut blob = [0u8; REPORT_DATA_LEN];
        blob[..bytes.len()].copy_from_slice(bytes);
        let forced = lock(&self.faults).iter().find_map(|f| match f {
            TsmFault::ReportData(d) => Some(*d),
            _ => None,
        });
        let quote = (self.quote)(&forced.unwrap_or(blob));
        std::fs::write(dir.join("outblob"), quote)
    }
}

impl TsmFs for FakeTsm {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(parent) if !parent.is_dir() => return Err(errno(libc::ENOENT)),
            // configfs-tsm takes report directories only at the root.
            Some(parent) if parent != self.root() => return Err(errno(libc::EPERM)),
            _ => {}
        }
        std::fs::create_dir(path)?;
        let provider = format!("{}\n", lock(&self.provider));
        for (name, content) in [
            ("inblob", ""),
            ("outblob", ""),
            ("auxblob", ""),
            ("provider", provider.as_str()),
            ("generation", "0\n"),
            ("privlevel", ""),
            ("privlevel_floor", "0\n"),
        ] {
            std::fs::write(path.join(name), content)?;
        }
        lock(&self.created).push(path.to_path_buf());
        Ok(())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        if self.has(|f| *f == TsmFault::RmdirFails) {
            return Err(errno(libc::EBUSY));
        }
        std::fs::remove_dir_all(path)
    }

    fn read(&self, path: &Path, max: usize) -> io::Result<Vec<u8>> {
        let is_outblob = path.file_name().is_some_and(|n| n == "outblob");
        if is_outblob {
            let mut faults = lock(&self.faults);
            if let Some(TsmFault::BusyOutblob(n)) = faults
                .iter_mut()
                .find(|f| matches!(f, TsmFault::BusyOutblob(_)))
                && *n > 0
            {
                *n -= 1;
                return Err(errno(libc::EBUSY));
            }
        }
        let mut bytes = std::fs::read(path)?;
        if is_outblob {
            if bytes.is_empty() {
                // The kernel generates on read; nothing written yet.
                return Err(errno(libc::EINVAL));
            }
            for f in lock(&self.faults).iter() {
                match f {
                    TsmFault::TruncateOutblob(n) => bytes.truncate(*n),
                    TsmFault::AppendOutblob(extra) => bytes.extend_from_slice(extra),
                    _ => {}
                }
            }
        }
        bytes.truncate(max.saturating_add(1));
        Ok(bytes)
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let dir = path.parent().ok_or_else(|| errno(libc::EINVAL))?;
        match path.file_name().and_then(|n| n.to_str()) {
            Some("inblob") => {
                self.commit_inblob(dir, bytes)?;
                if self.has(|f| *f == TsmFault::ConcurrentWrite) {
                    self.commit_inblob(dir, &[0xEE; REPORT_DATA_LEN])?;
                }
                Ok(())
            }
            // Every other attribute used here is read-only.
            _ => Err(errno(libc::EACCES)),
        }
    }
}

/// `quote` with `report_data` written at its `REPORTDATA` offset (v4 or v5).
pub fn patch_tdx_quote(quote: &[u8], report_data: &[u8]) -> Vec<u8> {
    let mut out = quote.to_vec();
    use kolm_tee_layouts::tdx::{quote as layout, td_report10};
    let v5 = quote.get(..2) == Some(&[5, 0][..]);
    let body = if v5 {
        layout::V5_BODY_OFFSET
    } else {
        layout::V4_BODY_OFFSET
    };
    let at = body + td_report10::REPORTDATA.offset();
    let n = report_data.len().min(REPORT_DATA_LEN);
    if let (Some(dst), Some(src)) = (out.get_mut(at..at + n), report_data.get(..n)) {
        dst.copy_from_slice(src);
    }
    out
}
