//! Forms forced where smaller ones would fit (`CallArgs::forced`): a Chunked WRITE and a
//! Long ECHO of a few bytes, a Reply chunk offered for a NULL; each answered correctly and
//! seen in that form by both ends' counters.

mod common;

use common::*;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::proto::plan::{CallForm, Forced};
use rpcrdma_engine::requester::CallArgs;

#[test]
fn forced_forms_are_sent_and_answered() {
    let cfg = config();
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");

    // A 100-byte WRITE fits inline; forced Chunked, its data goes through a Read chunk.
    let data = pattern(9, 100);
    let mut write = CallArgs::new(PROG, VERS, WRITE, &[0, 0, 0, 9], 8);
    write.bulk_arg = Some(&data);
    write.forced = Forced {
        min_form: Some(CallForm::Chunked),
        reply_chunk: false,
    };
    let ok = call(&mut c, &mut s, &write, |x| {
        x.result
            .map(|r| word(r.results, 0) == Some(1) && word(r.results, 4) == Some(100))
            .unwrap_or(false)
    });
    assert!(ok, "the chunked WRITE's data arrived intact");
    assert_eq!(
        (c.snapshot().chunked_calls, s.snapshot().chunked_calls),
        (1, 1)
    );

    // A 64-byte ECHO, forced Long: the whole Call in a Position-Zero Read chunk.
    let arg = opaque(&pattern(3, 64));
    let mut echo = CallArgs::new(PROG, VERS, ECHO, &arg, 128);
    echo.forced = Forced {
        min_form: Some(CallForm::Long),
        reply_chunk: false,
    };
    let same = call(&mut c, &mut s, &echo, |x| {
        x.result
            .map(|r| r.results == arg.as_slice())
            .unwrap_or(false)
    });
    assert!(same, "the Long ECHO came back");
    assert_eq!((c.snapshot().long_calls, s.snapshot().long_calls), (1, 1));

    // A NULL offering a Reply chunk it does not need: answered (inline or through it).
    let mut null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    null.forced = Forced {
        min_form: None,
        reply_chunk: true,
    };
    let answered = call(&mut c, &mut s, &null, |x| x.result.is_ok());
    assert!(answered);
    // Neither forced Call went the Short way.
    assert_eq!(c.snapshot().short_calls, 1, "only the NULL is Short");
}
