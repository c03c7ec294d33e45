//! The hardware attestation providers against their fakes, fed with the
//! genuine sample evidence in `shared/attestation-samples` (located by
//! `kolm_testkit::samples`; never copied here): the fakes start from real
//! documents, reports and quotes and only write the request's fields into
//! them, so the providers' parsers run on real layouts. Error paths:
//! device missing, busy with a bound, short and over-long responses, the
//! wrong report data echoed back, a concurrent configfs-tsm writer, no host
//! certificates (the offline bundle), and the certificate buffer retry.

use std::path::{Path, PathBuf};

use kolm_enclave::providers::fake::{
    FakeNsm, FakeSevGuest, FakeTsm, NsmFault, SnpFault, TsmFault, patch_tdx_quote,
};
use kolm_enclave::providers::nitro::{
    NSM_NONCE_MAX, NitroDocument, NitroProvider, NitroRequest, NsmFile,
};
use kolm_enclave::providers::snp::{
    GuestRequestError, PAGE_SIZE, SNP_GUEST_VMM_ERR_INVALID_LEN, SevGuestDevice, SevGuestFile,
    SnpBundle, SnpExtReportReq, SnpOptions, SnpProvider, SnpReportReq, SnpReportResp, guid,
};
use kolm_enclave::providers::tdx::{TdxOptions, TdxProvider, TdxQuote};
use kolm_enclave::providers::{
    CollateralSource, HardwareEvidence, MeasurementKind, ProviderError, RetryPolicy,
};
use kolm_format::container::EntryData;
use kolm_format::content_id::ContentId;
use kolm_format::evidence::{EVIDENCE_SCHEMA_V1, EvidenceFile, EvidenceIndex};
use kolm_format::hexbytes::HexBytes;
use serde_json::Value;

const RD: [u8; 64] = [0x5a; 64];

/// Says whether an error is the expected one.
type Check = fn(&ProviderError) -> bool;

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn expected(root: &Path, platform: &str) -> Value {
    serde_json::from_slice(&read(&root.join(platform).join("expected.json"))).expect("json")
}

fn hex64(s: &str) -> [u8; 64] {
    hex::decode(s).expect("hex").try_into().expect("64 bytes")
}

fn hex48(s: &str) -> [u8; 48] {
    hex::decode(s).expect("hex").try_into().expect("48 bytes")
}

/// The bundle the sealer would write must pass the evidence index rules
/// (slot names, roles, caps) of `kolm_format`.
fn assert_index_accepts(ev: &HardwareEvidence) {
    let bundle = ev.to_bundle();
    let files = bundle
        .files
        .iter()
        .map(|(path, bytes, role)| EvidenceFile {
            file: kolm_format::seal::file_record(path, &EntryData::Bytes(bytes.clone()))
                .expect("record"),
            role: *role,
        })
        .collect();
    let index = EvidenceIndex {
        schema: EVIDENCE_SCHEMA_V1.into(),
        platform: bundle.platform,
        manifest_cid: ContentId::for_json(b"{}"),
        report_data: HexBytes(ev.report_data),
        files,
    };
    index.to_canonical_bytes().expect("index accepted");
}

// ------------------------------------------------------------------ Nitro

fn nitro_sample(root: &Path) -> (Vec<u8>, [u8; 48]) {
    let exp = expected(root, "nitro");
    let case = &exp["cases"][0];
    let file = case["file"].as_str().expect("file");
    let pcr0 = hex48(case["fields"]["pcrs"]["0"].as_str().expect("pcr0"));
    (read(&root.join("nitro").join(file)), pcr0)
}

fn nitro(fake: FakeNsm, request: NitroRequest) -> NitroProvider<FakeNsm> {
    NitroProvider::new(fake, request, RetryPolicy::immediate(3)).expect("provider")
}

/// COSE_Sign1 elements 0, 1 and 3 (headers and signature).
fn cose_frame(doc: &[u8]) -> Vec<ciborium::Value> {
    let v: ciborium::Value = ciborium::de::from_reader(doc).expect("cbor");
    let ciborium::Value::Array(items) = v else {
        panic!("not an array")
    };
    vec![items[0].clone(), items[1].clone(), items[3].clone()]
}

#[test]
fn nitro_genuine_document_carries_our_report_data() {
    let Some(root) = kolm_testkit::samples("nitro/expected.json") else {
        return;
    };
    let (template, pcr0) = nitro_sample(&root);
    let request = NitroRequest {
        nonce: Some(vec![7; 32]),
        public_key: Some(vec![0x30, 0x03, 0x01, 0x02, 0x03]),
    };
    let mut p = nitro(
        FakeNsm::new(template.clone()).expect("fake"),
        request.clone(),
    );
    p.collateral().expect("no collateral");
    let ev = p.attest(&RD).expect("attest");
    assert_eq!(ev.measurement.kind, MeasurementKind::NitroPcr0);
    assert_eq!(ev.measurement.value, pcr0);
    assert_eq!(ev.attestation.path, "evidence/nitro.cose");
    assert_eq!(ev.collateral_source, CollateralSource::Embedded);
    let doc = NitroDocument::parse(&ev.attestation.bytes).expect("doc");
    assert_eq!(doc.user_data.as_deref(), Some(&RD[..]));
    assert_eq!(doc.nonce, request.nonce);
    assert_eq!(doc.public_key, request.public_key);
    // Only the payload changed: the genuine headers and signature stay.
    assert_eq!(cose_frame(&ev.attestation.bytes), cose_frame(&template));
    assert_index_accepts(&ev);

    // What reached the device: DescribePCR, then Attestation.
    let requests = p.device().requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        hex::encode(&requests[0]),
        "a16b4465736372696265504352a165696e64657800"
    );
    let att: ciborium::Value = ciborium::de::from_reader(&requests[1][..]).expect("cbor");
    let body = &att.as_map().expect("map")[0];
    assert_eq!(body.0.as_text(), Some("Attestation"));
    let fields = body.1.as_map().expect("fields");
    assert_eq!(fields[0].0.as_text(), Some("user_data"));
    assert_eq!(fields[0].1.as_bytes().map(Vec::as_slice), Some(&RD[..]));
}

#[test]
fn nitro_refuses_documents_not_bound_to_the_request() {
    let Some(root) = kolm_testkit::samples("nitro/expected.json") else {
        return;
    };
    let (template, _) = nitro_sample(&root);
    for (fault, want) in [
        // The genuine document as it is: someone else's user_data.
        (NsmFault::Template, "user_data"),
        (NsmFault::UserData(vec![0x5b; 64]), "user_data"),
        (NsmFault::UserData(RD[..63].to_vec()), "user_data"),
        (NsmFault::Nonce(vec![1]), "nonce"),
    ] {
        let fake = FakeNsm::new(template.clone()).expect("fake");
        fake.push_faults([None, Some(fault.clone())]);
        let err = nitro(fake, NitroRequest::default())
            .attest(&RD)
            .unwrap_err();
        match err {
            ProviderError::ReportDataMismatch { field } | ProviderError::EchoMismatch { field } => {
                assert_eq!(field, want, "{fault:?}")
            }
            other => panic!("{fault:?}: {other}"),
        }
    }
}

#[test]
fn nitro_pcr0_must_be_locked_and_match_the_document() {
    let Some(root) = kolm_testkit::samples("nitro/expected.json") else {
        return;
    };
    let (template, pcr0) = nitro_sample(&root);
    let unlocked = FakeNsm::new(template.clone())
        .expect("fake")
        .with_pcr0(pcr0.to_vec(), false);
    let err = nitro(unlocked, NitroRequest::default())
        .attest(&RD)
        .unwrap_err();
    assert!(matches!(err, ProviderError::Pcr { index: 0, .. }), "{err}");
    let other = FakeNsm::new(template.clone())
        .expect("fake")
        .with_pcr0(vec![0; 48], true);
    let err = nitro(other, NitroRequest::default())
        .attest(&RD)
        .unwrap_err();
    assert!(
        err.to_string().contains("differs from DescribePCR"),
        "{err}"
    );
    let short = FakeNsm::new(template)
        .expect("fake")
        .with_pcr0(vec![0; 32], true);
    let err = nitro(short, NitroRequest::default())
        .describe_pcr0()
        .unwrap_err();
    assert!(matches!(err, ProviderError::Pcr { .. }), "{err}");
}

#[test]
fn nitro_busy_is_retried_within_the_bound() {
    let Some(root) = kolm_testkit::samples("nitro/expected.json") else {
        return;
    };
    let (template, _) = nitro_sample(&root);
    let fake = FakeNsm::new(template.clone()).expect("fake");
    fake.push_faults([
        Some(NsmFault::Errno(libc::EBUSY)),
        Some(NsmFault::Errno(libc::EAGAIN)),
    ]);
    let p = nitro(fake, NitroRequest::default());
    p.describe_pcr0().expect("third attempt succeeds");
    assert_eq!(p.device().requests().len(), 3);

    let fake = FakeNsm::new(template).expect("fake");
    fake.push_faults((0..3).map(|_| Some(NsmFault::Errno(libc::EBUSY))));
    let p = nitro(fake, NitroRequest::default());
    let err = p.describe_pcr0().unwrap_err();
    assert!(
        matches!(err, ProviderError::Busy { attempts: 3, .. }),
        "{err}"
    );
    assert_eq!(p.device().requests().len(), 3);
}

#[test]
fn nitro_malformed_responses_and_errors() {
    let Some(root) = kolm_testkit::samples("nitro/expected.json") else {
        return;
    };
    let (template, _) = nitro_sample(&root);
    let cases: [(Vec<Option<NsmFault>>, Check); 5] = [
        (vec![Some(NsmFault::Truncate(9))], |e| {
            matches!(e, ProviderError::Malformed { .. })
        }),
        (vec![None, Some(NsmFault::Truncate(200))], |e| {
            matches!(e, ProviderError::Malformed { .. })
        }),
        (vec![Some(NsmFault::Append(vec![0]))], |e| {
            e.to_string().contains("after the CBOR item")
        }),
        (
            vec![Some(NsmFault::ErrorCode("InternalError".into()))],
            |e| matches!(e, ProviderError::NsmError { code } if code == "InternalError"),
        ),
        (vec![Some(NsmFault::Errno(libc::EIO))], |e| {
            matches!(e, ProviderError::Io { .. })
        }),
    ];
    for (faults, check) in cases {
        let fake = FakeNsm::new(template.clone()).expect("fake");
        fake.push_faults(faults.clone());
        let err = nitro(fake, NitroRequest::default())
            .attest(&RD)
            .unwrap_err();
        assert!(check(&err), "{faults:?}: {err}");
    }
}

#[test]
fn nitro_request_limits_and_missing_device() {
    let err = NsmFile::open("/nonexistent-kolm-test/nsm").unwrap_err();
    assert!(matches!(err, ProviderError::DeviceMissing { .. }), "{err}");
    let Some(root) = kolm_testkit::samples("nitro/expected.json") else {
        return;
    };
    let (template, _) = nitro_sample(&root);
    let err = NitroProvider::new(
        FakeNsm::new(template).expect("fake"),
        NitroRequest {
            nonce: Some(vec![0; NSM_NONCE_MAX + 1]),
            public_key: None,
        },
        RetryPolicy::immediate(1),
    )
    .unwrap_err();
    assert!(matches!(err, ProviderError::TooLarge { .. }), "{err}");
}

// ------------------------------------------------------------------ SEV-SNP

struct SnpCase {
    dir: PathBuf,
    report: Vec<u8>,
    report_data: [u8; 64],
    measurement: [u8; 48],
}

fn snp_case(root: &Path, dir: &str, report: &str) -> SnpCase {
    let exp = expected(root, "sev-snp");
    let case = exp["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["dir"] == dir && c["report"] == report && c.get("fields").is_some())
        .expect("case");
    let dir = root.join("sev-snp").join(dir);
    SnpCase {
        report: read(&dir.join(report)),
        report_data: hex64(case["fields"]["report_data"].as_str().expect("rd")),
        measurement: hex48(case["fields"]["measurement"].as_str().expect("m")),
        dir,
    }
}

/// DER certificates of a PEM file.
fn pem_ders(pem: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(pem);
    text.split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .map(|block| {
            let body: String = block
                .split("-----END CERTIFICATE-----")
                .next()
                .expect("block")
                .split_whitespace()
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .expect("base64")
        })
        .collect()
}

/// The go-sev-guest Milan v2 case and a bundle of its VCEK alone.
fn snp_v2() -> Option<(PathBuf, SnpCase, SnpBundle)> {
    let root = kolm_testkit::samples("sev-snp/expected.json")?;
    let case = snp_case(&root, "milan-v2-gosevguest", "report.bin");
    let bundle = SnpBundle {
        vcek_der: case.dir.join("vcek.der"),
        ask_ark_pem: None,
    };
    Some((root, case, bundle))
}

fn snp_options(bundle: Option<SnpBundle>) -> SnpOptions {
    SnpOptions {
        bundle,
        initial_certs_len: PAGE_SIZE,
        retry: RetryPolicy::immediate(3),
    }
}

fn snp<D: SevGuestDevice>(device: D, bundle: Option<SnpBundle>) -> SnpProvider<D> {
    let mut p = SnpProvider::new(device, snp_options(bundle));
    p.collateral().expect("collateral");
    p
}

fn host_certs(case: &SnpCase) -> Vec<([u8; 16], Vec<u8>)> {
    let chain = pem_ders(&read(&case.dir.join("ask_ark_milan.pem")));
    assert_eq!(chain.len(), 2);
    vec![
        (guid::VCEK, read(&case.dir.join("vcek.der"))),
        (guid::ASK, chain[0].clone()),
        (guid::ARK, chain[1].clone()),
    ]
}

#[test]
fn snp_genuine_report_with_host_certificates() {
    let Some((_, case, _)) = snp_v2() else {
        return;
    };
    let certs = host_certs(&case);
    let mut p = snp(
        FakeSevGuest::new(case.report.clone(), Some(certs.clone())),
        None,
    );
    // The sample's own report data: the fake writes identical bytes, so the
    // genuine report comes back unchanged.
    let ev = p.attest(&case.report_data).expect("attest");
    assert_eq!(ev.attestation.bytes, case.report);
    assert_eq!(ev.measurement.kind, MeasurementKind::SnpMeasurement);
    assert_eq!(ev.measurement.value, case.measurement);
    assert_eq!(ev.collateral_source, CollateralSource::Host);
    let paths: Vec<_> = ev.collateral.iter().map(|b| b.path).collect();
    assert_eq!(paths, ["evidence/snp-ask-ark.pem", "evidence/snp-vcek.der"]);
    assert_eq!(ev.collateral[1].bytes, certs[0].1);
    assert_eq!(
        pem_ders(&ev.collateral[0].bytes),
        vec![certs[1].1.clone(), certs[2].1.clone()]
    );
    // One page was too small for three certificates: grown once, as the
    // kernel asked.
    assert_eq!(
        p.device().calls(),
        [
            ("SNP_GET_EXT_REPORT", PAGE_SIZE),
            ("SNP_GET_EXT_REPORT", 2 * PAGE_SIZE)
        ]
    );
    assert_index_accepts(&ev);
}

#[test]
fn snp_no_host_certificates_uses_the_offline_bundle() {
    let Some((_, case, _)) = snp_v2() else {
        return;
    };
    let bundle = SnpBundle {
        vcek_der: case.dir.join("vcek.der"),
        ask_ark_pem: Some(case.dir.join("ask_ark_milan.pem")),
    };
    // Host with an empty certificate table, and a kernel without the
    // extended request (SNP_GET_REPORT fallback).
    for certs in [Some(Vec::new()), None] {
        let mut p = snp(
            FakeSevGuest::new(case.report.clone(), certs.clone()),
            Some(bundle.clone()),
        );
        let ev = p.attest(&RD).expect("attest");
        assert_eq!(
            ev.collateral_source,
            CollateralSource::OfflineBundle {
                path: bundle.vcek_der.clone()
            }
        );
        assert_eq!(ev.collateral[1].bytes, read(&bundle.vcek_der));
        assert_eq!(
            ev.collateral[0].bytes,
            read(bundle.ask_ark_pem.as_ref().expect("pem"))
        );
        assert_eq!(&ev.attestation.bytes[0x50..0x90], &RD[..]);
        assert_eq!(ev.measurement.value, case.measurement);
        let calls = p.device().calls();
        if certs.is_none() {
            assert_eq!(calls.last().map(|c| c.0), Some("SNP_GET_REPORT"));
        } else {
            assert_eq!(calls, [("SNP_GET_EXT_REPORT", PAGE_SIZE)]);
        }
        assert_index_accepts(&ev);
    }
    // Neither host certificates nor a bundle: the report without
    // collateral, for the run path to complete with the host's bundle sent
    // with the job (or refuse: `select::Attesting`).
    let mut p = snp(
        FakeSevGuest::new(case.report.clone(), Some(Vec::new())),
        None,
    );
    let ev = p.attest(&RD).expect("attest");
    assert_eq!(ev.collateral_source, CollateralSource::Absent);
    assert!(ev.collateral.is_empty(), "{:?}", ev.collateral);
    assert_eq!(&ev.attestation.bytes[0x50..0x90], &RD[..]);
}

#[test]
fn snp_refuses_reports_not_bound_to_the_request() {
    let Some((root, case, bundle)) = snp_v2() else {
        return;
    };
    // The genuine report, someone else's report data.
    let fake = FakeSevGuest::new(case.report.clone(), Some(Vec::new()));
    fake.push_faults([Some(SnpFault::Template)]);
    let err = snp(fake, Some(bundle.clone())).attest(&RD).unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::ReportDataMismatch {
                field: "REPORT_DATA"
            }
        ),
        "{err}"
    );
    let fake = FakeSevGuest::new(case.report.clone(), Some(Vec::new()));
    fake.push_faults([Some(SnpFault::ReportData([0; 64]))]);
    let err = snp(fake, Some(bundle.clone())).attest(&RD).unwrap_err();
    assert!(
        matches!(err, ProviderError::ReportDataMismatch { .. }),
        "{err}"
    );

    // A genuine VMPL 1 report with its own report data: the data matches,
    // the VMPL does not.
    let vmpl1 = snp_case(&root, "milan-v5-gcp", "report-vmpl1-reportdata.bin");
    let fake = FakeSevGuest::new(vmpl1.report.clone(), Some(Vec::new()));
    fake.push_faults([Some(SnpFault::Template)]);
    let err = snp(fake, Some(bundle))
        .attest(&vmpl1.report_data)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::VmplMismatch {
                requested: 0,
                found: 1
            }
        ),
        "{err}"
    );
}

#[test]
fn snp_vlek_report_needs_the_hosts_vlek() {
    let Some(root) = kolm_testkit::samples("sev-snp/expected.json") else {
        return;
    };
    let case = snp_case(&root, "milan-v3-vlek-trustee", "report.bin");
    let vlek = read(&case.dir.join("vlek.der"));
    let ev = snp(
        FakeSevGuest::new(case.report.clone(), Some(vec![(guid::VLEK, vlek.clone())])),
        None,
    )
    .attest(&RD)
    .expect("attest");
    assert_eq!(ev.collateral_source, CollateralSource::Host);
    assert_eq!(ev.collateral.len(), 1);
    assert_eq!(ev.collateral[0].bytes, vlek);
    assert_eq!(ev.measurement.value, case.measurement);

    // A bundle VCEK cannot stand in for a VLEK.
    let other = snp_case(&root, "milan-v2-gosevguest", "report.bin");
    let bundle = SnpBundle {
        vcek_der: other.dir.join("vcek.der"),
        ask_ark_pem: None,
    };
    let err = snp(
        FakeSevGuest::new(case.report, Some(Vec::new())),
        Some(bundle),
    )
    .attest(&RD)
    .unwrap_err();
    assert!(
        matches!(err, ProviderError::NoEndorsementKey { key: "VLEK", .. }),
        "{err}"
    );
}

#[test]
fn snp_busy_is_retried_within_the_bound() {
    let Some((_, case, _)) = snp_v2() else {
        return;
    };
    let certs = host_certs(&case);
    let eagain = SnpFault::Fail {
        errno: libc::EAGAIN,
        exitinfo2: 0,
    };
    let fake = FakeSevGuest::new(case.report.clone(), Some(certs.clone()));
    fake.push_faults([Some(eagain.clone()), Some(SnpFault::VmmBusy)]);
    let mut p = snp(fake, None);
    p.attest(&RD).expect("third attempt succeeds");
    assert_eq!(p.device().calls().len(), 4, "2 busy + 1 too small + 1 ok");

    let fake = FakeSevGuest::new(case.report, Some(certs));
    fake.push_faults((0..3).map(|_| Some(eagain.clone())));
    let mut p = snp(fake, None);
    let err = p.attest(&RD).unwrap_err();
    assert!(
        matches!(err, ProviderError::Busy { attempts: 3, .. }),
        "{err}"
    );
    assert_eq!(p.device().calls().len(), 3);
}

/// A host that always wants a bigger certificate buffer.
struct GreedyHost(std::sync::Mutex<Vec<usize>>);

impl SevGuestDevice for GreedyHost {
    fn path(&self) -> &Path {
        Path::new("greedy")
    }

    fn get_report(&self, _: &SnpReportReq, _: &mut SnpReportResp) -> Result<(), GuestRequestError> {
        panic!("not used")
    }

    fn get_ext_report(
        &self,
        req: &mut SnpExtReportReq,
        _: &mut SnpReportResp,
        certs: &mut [u8],
    ) -> Result<(), GuestRequestError> {
        self.0.lock().expect("lock").push(certs.len());
        req.certs_len = (certs.len() + PAGE_SIZE) as u32;
        Err(GuestRequestError {
            errno: libc::EIO,
            exitinfo2: u64::from(SNP_GUEST_VMM_ERR_INVALID_LEN) << 32,
        })
    }
}

#[test]
fn snp_certificate_buffer_is_grown_once_only() {
    let mut p = snp(GreedyHost(Default::default()), None);
    let err = p.attest(&RD).unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::CertBufferTooSmall {
                offered: 8192,
                needed: 12288
            }
        ),
        "{err}"
    );
    assert_eq!(
        *p.device().0.lock().expect("lock"),
        [PAGE_SIZE, 2 * PAGE_SIZE]
    );
}

#[test]
fn snp_malformed_responses_and_firmware_errors() {
    let Some((_, case, bundle)) = snp_v2() else {
        return;
    };
    let cases: [(SnpFault, Check); 5] = [
        (SnpFault::ReportSize(1000), |e| {
            e.to_string().contains("REPORT_SIZE 1000")
        }),
        (SnpFault::Status(0x16), |e| {
            matches!(e, ProviderError::FirmwareStatus { status: 0x16 })
        }),
        (SnpFault::TrailingByte, |e| {
            e.to_string().contains("after the report")
        }),
        (
            SnpFault::Fail {
                errno: libc::EIO,
                exitinfo2: 0x16,
            },
            |e| matches!(e, ProviderError::GuestRequest { fw_error: 0x16, .. }),
        ),
        (
            SnpFault::Fail {
                errno: libc::ETIMEDOUT,
                exitinfo2: 0,
            },
            |e| matches!(e, ProviderError::GuestRequest { errno, .. } if *errno == libc::ETIMEDOUT),
        ),
    ];
    for (fault, check) in cases {
        let fake = FakeSevGuest::new(case.report.clone(), Some(Vec::new()));
        fake.push_faults([Some(fault.clone())]);
        let err = snp(fake, Some(bundle.clone())).attest(&RD).unwrap_err();
        assert!(check(&err), "{fault:?}: {err}");
    }
    // A truncated template (a short report from the device).
    let fake = FakeSevGuest::new(case.report[..1000].to_vec(), Some(Vec::new()));
    assert!(snp(fake, Some(bundle)).attest(&RD).is_err());
}

#[test]
fn snp_bundle_and_device_errors() {
    let err = SevGuestFile::open("/nonexistent-kolm-test/sev-guest").unwrap_err();
    assert!(matches!(err, ProviderError::DeviceMissing { .. }), "{err}");
    let Some(root) = kolm_testkit::samples("sev-snp/expected.json") else {
        return;
    };
    let case = snp_case(&root, "milan-v5-gcp", "report.bin");
    let fake = || FakeSevGuest::new(case.report.clone(), Some(Vec::new()));
    // attest() before collateral().
    let err = SnpProvider::new(fake(), snp_options(None))
        .attest(&RD)
        .unwrap_err();
    assert!(matches!(err, ProviderError::CollateralNotLoaded), "{err}");
    for (bundle, needle) in [
        (
            SnpBundle {
                vcek_der: case.dir.join("vcek.pem"),
                ask_ark_pem: None,
            },
            "not one DER certificate",
        ),
        (
            SnpBundle {
                vcek_der: case.dir.join("missing.der"),
                ask_ark_pem: None,
            },
            "missing.der",
        ),
        (
            SnpBundle {
                vcek_der: root.join("sev-snp/milan-v2-gosevguest/vcek.der"),
                ask_ark_pem: Some(case.dir.join("vcek.pem")),
            },
            "expected 2",
        ),
    ] {
        let err = SnpProvider::new(fake(), snp_options(Some(bundle)))
            .collateral()
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Bundle { .. }) && err.to_string().contains(needle),
            "{err}"
        );
    }
}

// ------------------------------------------------------------------ TDX

struct TdxCase {
    dir: PathBuf,
    quote: Vec<u8>,
    mrtd: [u8; 48],
    report_data: [u8; 64],
}

fn tdx_cases(root: &Path) -> Vec<TdxCase> {
    let exp = expected(root, "tdx");
    exp["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .filter(|c| c.get("fields").is_some())
        .map(|c| {
            let dir = root.join("tdx").join(c["dir"].as_str().expect("dir"));
            TdxCase {
                quote: read(&dir.join(c["quote"].as_str().expect("quote"))),
                mrtd: hex48(c["fields"]["td"]["mrtd"].as_str().expect("mrtd")),
                report_data: hex64(c["fields"]["td"]["report_data"].as_str().expect("rd")),
                dir,
            }
        })
        .collect()
}

fn patching(quote: Vec<u8>) -> FakeTsm {
    FakeTsm::new(Box::new(move |inblob| patch_tdx_quote(&quote, inblob))).expect("fake")
}

fn tdx(fs: FakeTsm, collateral: PathBuf, attempts: u32) -> TdxProvider<FakeTsm> {
    let root = fs.root().to_path_buf();
    let mut p = tdx_unloaded(fs, root, Some(collateral), attempts);
    p.collateral().expect("collateral");
    p
}

/// A TDX provider on `fs` with its report root at `root`, the collateral
/// not loaded yet.
fn tdx_unloaded(
    fs: FakeTsm,
    root: PathBuf,
    collateral: Option<PathBuf>,
    attempts: u32,
) -> TdxProvider<FakeTsm> {
    TdxProvider::new(
        fs,
        TdxOptions {
            root,
            collateral,
            retry: RetryPolicy::immediate(attempts),
        },
    )
}

fn assert_no_report_dirs(p: &TdxProvider<FakeTsm>) {
    let left: Vec<_> = std::fs::read_dir(p.fs().root()).expect("root").collect();
    assert!(left.is_empty(), "report directories left behind: {left:?}");
    assert_eq!(p.fs().created().len(), 1);
}

/// The go-tdx-guest sample carries a test string after the signature data.
fn is_gotdxguest(case: &TdxCase) -> bool {
    case.dir.ends_with("v4-50806f-gotdxguest-2023-06")
}

#[test]
fn tdx_genuine_quotes_v4_and_v5() {
    let Some(root) = kolm_testkit::samples("tdx/expected.json") else {
        return;
    };
    let cases = tdx_cases(&root);
    assert_eq!(cases.len(), 4);
    for case in cases.iter().filter(|c| !is_gotdxguest(c)) {
        let collateral = case.dir.join("collateral.json");
        let mut p = tdx(patching(case.quote.clone()), collateral.clone(), 3);
        let ev = p.attest(&RD).expect("attest");
        assert_eq!(ev.measurement.kind, MeasurementKind::TdxMrtd);
        assert_eq!(ev.measurement.value, case.mrtd);
        let quote = TdxQuote::parse(&ev.attestation.bytes).expect("quote");
        assert_eq!(quote.report_data, RD);
        assert_eq!(quote.padding, 0);
        // Zero padding after the signature data is dropped, nothing else.
        let padded = TdxQuote::parse(&case.quote).expect("sample");
        assert_eq!(
            &ev.attestation.bytes[..],
            &patch_tdx_quote(&padded.bytes, &RD)[..]
        );
        assert_eq!(ev.collateral[0].path, "evidence/tdx-collateral.json");
        assert_eq!(ev.collateral[0].bytes, read(&collateral));
        assert_eq!(
            ev.collateral_source,
            CollateralSource::OfflineBundle { path: collateral }
        );
        assert_index_accepts(&ev);
        assert_no_report_dirs(&p);
        // The provider wrote exactly the report data, once.
        let generation = p.fs().created();
        assert_eq!(generation.len(), 1);

        // The genuine quote unchanged, with its own report data.
        let genuine = case.quote.clone();
        let fs = FakeTsm::new(Box::new(move |_| genuine.clone())).expect("fake");
        let ev = tdx(fs, case.dir.join("collateral.json"), 1)
            .attest(&case.report_data)
            .expect("genuine");
        assert_eq!(ev.attestation.bytes, padded.bytes);
        assert_eq!(&case.quote[..padded.bytes.len()], &ev.attestation.bytes[..]);
    }
    // v4 dcap-qvl sample: 70 zero bytes of padding; v5 samples: none.
    let v4 = cases
        .iter()
        .find(|c| c.dir.ends_with("v4-b0c06f-dcapqvl-2025-06"))
        .expect("v4");
    assert_eq!(TdxQuote::parse(&v4.quote).expect("v4").padding, 70);
}

#[test]
fn tdx_refuses_quotes_not_bound_to_the_request() {
    let Some(root) = kolm_testkit::samples("tdx/expected.json") else {
        return;
    };
    let cases = tdx_cases(&root);
    let case = &cases[0];
    let collateral = case.dir.join("collateral.json");
    // The genuine quote: someone else's report data.
    let genuine = case.quote.clone();
    let fs = FakeTsm::new(Box::new(move |_| genuine.clone())).expect("fake");
    let mut p = tdx(fs, collateral.clone(), 1);
    let err = p.attest(&RD).unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::ReportDataMismatch {
                field: "REPORTDATA"
            }
        ),
        "{err}"
    );
    assert_no_report_dirs(&p);

    let fs = patching(case.quote.clone());
    fs.add_fault(TsmFault::ReportData([1; 64]));
    let err = tdx(fs, collateral, 1).attest(&RD).unwrap_err();
    assert!(
        matches!(err, ProviderError::ReportDataMismatch { .. }),
        "{err}"
    );
}

#[test]
fn tdx_concurrent_writer_is_detected() {
    let Some(root) = kolm_testkit::samples("tdx/expected.json") else {
        return;
    };
    let case = &tdx_cases(&root)[0];
    let fs = patching(case.quote.clone());
    fs.add_fault(TsmFault::ConcurrentWrite);
    let mut p = tdx(fs, case.dir.join("collateral.json"), 1);
    let err = p.attest(&RD).unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::GenerationChanged {
                before: 0,
                after: 2,
                expected: 1
            }
        ),
        "{err}"
    );
    assert_no_report_dirs(&p);
}

#[test]
fn tdx_busy_outblob_is_retried_within_the_bound() {
    let Some(root) = kolm_testkit::samples("tdx/expected.json") else {
        return;
    };
    let case = &tdx_cases(&root)[0];
    let fs = patching(case.quote.clone());
    fs.add_fault(TsmFault::BusyOutblob(2));
    tdx(fs, case.dir.join("collateral.json"), 3)
        .attest(&RD)
        .expect("third read succeeds");
    let fs = patching(case.quote.clone());
    fs.add_fault(TsmFault::BusyOutblob(3));
    let mut p = tdx(fs, case.dir.join("collateral.json"), 3);
    let err = p.attest(&RD).unwrap_err();
    assert!(
        matches!(err, ProviderError::Busy { attempts: 3, .. }),
        "{err}"
    );
    assert_no_report_dirs(&p);
}

#[test]
fn tdx_short_and_overlong_quotes() {
    let Some(root) = kolm_testkit::samples("tdx/expected.json") else {
        return;
    };
    let cases = tdx_cases(&root);
    let case = &cases[0];
    let collateral = case.dir.join("collateral.json");
    for (fault, needle) in [
        (TsmFault::TruncateOutblob(600), "TD report"),
        (TsmFault::TruncateOutblob(4000), "signature data"),
        (TsmFault::TruncateOutblob(10), "header"),
        (
            TsmFault::AppendOutblob(b"x".to_vec()),
            "after the signature data",
        ),
    ] {
        let fs = patching(case.quote.clone());
        fs.add_fault(fault.clone());
        let mut p = tdx(fs, collateral.clone(), 1);
        let err = p.attest(&RD).unwrap_err();
        assert!(
            matches!(err, ProviderError::Malformed { .. }) && err.to_string().contains(needle),
            "{fault:?}: {err}"
        );
        assert_no_report_dirs(&p);
    }
    // go-tdx-guest's sample: a genuine quote with text appended after it.
    let got = cases.iter().find(|c| is_gotdxguest(c)).expect("gotdxguest");
    let fs = patching(got.quote.clone());
    let err = tdx(fs, got.dir.join("collateral.json"), 1)
        .attest(&RD)
        .unwrap_err();
    assert!(err.to_string().contains("non-zero"), "{err}");
}

#[test]
fn tdx_provider_device_and_collateral_errors() {
    let Some(root) = kolm_testkit::samples("tdx/expected.json") else {
        return;
    };
    let case = &tdx_cases(&root)[0];
    let collateral = case.dir.join("collateral.json");

    let fs = patching(case.quote.clone());
    fs.add_fault(TsmFault::Provider("sev_guest".into()));
    let mut p = tdx(fs, collateral.clone(), 1);
    let err = p.attest(&RD).unwrap_err();
    assert!(
        matches!(&err, ProviderError::WrongProvider { found, .. } if found == "sev_guest"),
        "{err}"
    );
    assert_no_report_dirs(&p);

    // rmdir failing after a good quote is an error, not a silent leak.
    let fs = patching(case.quote.clone());
    fs.add_fault(TsmFault::RmdirFails);
    let err = tdx(fs, collateral.clone(), 1).attest(&RD).unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Io {
                operation: "rmdir",
                ..
            }
        ),
        "{err}"
    );

    // No configfs-tsm report root.
    let fs = patching(case.quote.clone());
    let missing = fs.root().join("absent");
    let mut p = tdx_unloaded(fs, missing, Some(collateral.clone()), 1);
    p.collateral().expect("collateral");
    let err = p.attest(&RD).unwrap_err();
    assert!(matches!(err, ProviderError::DeviceMissing { .. }), "{err}");

    // Collateral: required before attest, checked when loaded.
    let fs = patching(case.quote.clone());
    let root_dir = fs.root().to_path_buf();
    let mut p = tdx_unloaded(fs, root_dir, Some(case.dir.join("quote.bin")), 1);
    let err = p.attest(&RD).unwrap_err();
    assert!(matches!(err, ProviderError::CollateralNotLoaded), "{err}");
    let err = p.collateral().unwrap_err();
    assert!(matches!(err, ProviderError::Bundle { .. }), "{err}");

    // No enclave-side bundle: the quote without collateral, for the run
    // path to complete with the host's bundle sent with the job.
    let fs = patching(case.quote.clone());
    let root_dir = fs.root().to_path_buf();
    let mut p = tdx_unloaded(fs, root_dir, None, 1);
    let err = p.attest(&RD).unwrap_err();
    assert!(matches!(err, ProviderError::CollateralNotLoaded), "{err}");
    p.collateral().expect("no bundle to load");
    let ev = p.attest(&RD).expect("attest");
    assert!(ev.collateral.is_empty(), "{:?}", ev.collateral);
    assert_eq!(ev.collateral_source, CollateralSource::Absent);
    assert_eq!(
        TdxQuote::parse(&ev.attestation.bytes)
            .expect("quote")
            .report_data,
        RD
    );
}
