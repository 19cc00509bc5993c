//! Fuzzes how chatd learns who is asking: the session cookie found in a `Cookie` header, and
//! the CMS's answer to the session check. None may panic; a found cookie, sent on alone, must
//! be found again as the same value (so chatd and the CMS agree on whose session it is); only a
//! 200 may yield a user, and only one with a usable id; a 401 is always a refusal.

#![no_main]

use atelier_chatd::caller::{
    find_session_cookie, CookieLookup, MAX_SESSION_COOKIE_LEN, SESSION_COOKIE,
};
use atelier_chatd::cms::{parse_me_answer, SessionCheck};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let CookieLookup::Found(value) = find_session_cookie(data) {
        assert!(!value.is_empty() && value.len() <= MAX_SESSION_COOKIE_LEN);
        assert!(!value.contains(&b';'));
        let sent = [SESSION_COOKIE.as_bytes(), b"=", value].concat();
        assert_eq!(find_session_cookie(&sent), CookieLookup::Found(value));
    }

    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let status = [200, 401, 403, 500][usize::from(selector % 4)];
    match parse_me_answer(status, body) {
        Ok(SessionCheck::SignedIn(caller)) => {
            assert_eq!(status, 200);
            let id = caller.user_id.as_bytes();
            assert!(!id.is_empty() && id.len() <= 128);
            assert!(id.iter().all(u8::is_ascii_graphic));
        }
        Ok(SessionCheck::Unauthorized | SessionCheck::MfaRequired) => assert_eq!(status, 401),
        Err(_) => assert_ne!(status, 401),
    }
});
