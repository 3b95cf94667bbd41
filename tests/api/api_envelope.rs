//! The envelope and the framework's answers, as OpenViking 0.5.2 gives them.

use crate::support::serve::Served;

#[test]
fn every_answer_is_openvikings_envelope() {
    let s = Served::new();
    let (code, v) = s.call("GET", "/health", &[], None);
    assert_eq!((code, v["healthy"].as_bool()), (200, Some(true)), "{v}");
    let (code, v) = s.call("GET", "/api/v1/system/status", &[], None);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"], "ok");
    assert_eq!(v["result"]["user"], "default");
    let (code, v) = s.call("GET", "/api/v1/no/such/route", &[], None);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{v}"
    );
    let (code, v) = s.call("POST", "/api/v1/system/wait", &[], Some(b"{not json"));
    assert_eq!((code, v["status"].as_str()), (400, Some("error")), "{v}");
    assert_eq!(v["error"]["code"], "INVALID_ARGUMENT");
    let (code, v) = s.call("DELETE", "/health", &[], None);
    assert_eq!(code, 405, "{v}");
    assert_eq!(v["status"], "error");
}
