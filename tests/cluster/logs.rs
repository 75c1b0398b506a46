//! `muster logs`: what drivers and executors wrote, read from their workers through the
//! leader, asked of a follower, followed to the process's end, and refused with a reason.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{
    Masters, app_run, driver, muster, running_executors, start_worker, stderr, submit, wait_for,
};

/// `muster logs ARGS...` through a follower first (it forwards to the leader).
fn logs(masters: &Masters, args: &[&str]) -> std::process::Output {
    Masters::client(&masters.list_from(2), &[&["logs"][..], args].concat())
}

/// `muster logs --follow ID` through a follower, to its end: what it printed.
fn follow(masters: &Masters, id: &str) -> String {
    let mut follow = muster()
        .args(["logs", "--follow", id])
        .env("MUSTER_MASTERS", masters.list_from(2))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while follow.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "--follow did not end with {id}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let followed = follow.wait_with_output().unwrap();
    assert!(
        followed.status.success(),
        "{}",
        String::from_utf8_lossy(&followed.stderr)
    );
    String::from_utf8(followed.stdout).unwrap()
}

#[test]
fn logs_follow_a_driver_to_its_end_and_read_what_it_wrote_in_full() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 4);
    let script = "for i in 1 2 3 4; do echo line-$i; sleep 0.4; done; echo oops >&2";
    let id = submit(&masters, &["--", "/bin/sh", "-c", script]);

    // Followed from its submission on: every line arrives, and the command ends with the
    // driver.
    assert_eq!(follow(&masters, &id), "line-1\nline-2\nline-3\nline-4\n");
    let status = wait_for(&masters, "the driver finished", |s| {
        driver(s, &id).is_some_and(|d| d["state"] == "FINISHED")
    });
    assert_eq!(driver(&status, &id).unwrap()["exit_code"], 0);

    let errors = logs(&masters, &["--stderr", &id]);
    assert!(
        errors.status.success(),
        "{}",
        String::from_utf8_lossy(&errors.stderr)
    );
    assert_eq!(errors.stdout, b"oops\n");

    // A reader that leaves ends a follow that waits for more.
    let chatty = submit(
        &masters,
        &["--", "/bin/sh", "-c", "echo first; exec sleep 600"],
    );
    let mut following = muster()
        .args(["logs", "--follow", &chatty])
        .env("MUSTER_MASTERS", masters.list_from(2))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(following.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "first\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while following.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "--follow outlived its reader");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A driver that waits has written nothing yet, and says so; once killed unplaced, a
    // follow of it ends at once.
    let waiting = submit(&masters, &["--cores", "64", "--", "/bin/true"]);
    let read = logs(&masters, &[&waiting]);
    assert!(read.status.success(), "{read:?}");
    assert!(read.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("not started on a worker yet"),
        "{read:?}"
    );
    crate::support::stdout(&Masters::client(&masters.list_from(1), &["kill", &waiting]));
    wait_for(&masters, "the waiting driver killed", |s| {
        driver(s, &waiting).is_some_and(|d| d["state"] == "KILLED")
    });
    assert_eq!(follow(&masters, &waiting), "");

    // Output larger than one read comes whole, byte for byte.
    let big = submit(
        &masters,
        &[
            "--",
            "/bin/sh",
            "-c",
            "head -c 300000 /dev/zero | tr '\\0' x",
        ],
    );
    wait_for(&masters, "the big driver finished", |s| {
        driver(s, &big).is_some_and(|d| d["state"] == "FINISHED")
    });
    let read = logs(&masters, &[&big]);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert_eq!(read.stdout.len(), 300_000);
    assert!(read.stdout.iter().all(|&b| b == b'x'));
}

#[test]
fn logs_follow_an_executor_past_its_end_and_refuse_what_nothing_can_serve() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 2);
    let (_run, app, _out) = app_run(
        &masters,
        &[
            "--cores-max",
            "1",
            "--executor-cores",
            "1",
            "--executor-memory",
            "256",
            "--",
            "/bin/sh",
            "-c",
            "echo executor-up; sleep 1; echo executor-done",
        ],
    );
    let status = wait_for(&masters, "the executor running", |s| {
        running_executors(s, &app).len() == 1
    });
    let first = running_executors(&status, &app)[0]["id"].clone();
    let executor = format!("{app}/{first}");
    // Followed past its end, when the masters no longer keep it: every line arrives.
    assert_eq!(follow(&masters, &executor), "executor-up\nexecutor-done\n");
    let status = wait_for(&masters, "the executor gone", |s| {
        running_executors(s, &app).iter().all(|e| e["id"] != first)
    });
    let worker = crate::support::worker_on(&status, "w1");
    let ended = logs(&masters, &["--worker", worker.as_str().unwrap(), &executor]);
    assert!(ended.status.success(), "{ended:?}");
    assert_eq!(ended.stdout, b"executor-up\nexecutor-done\n");
    // The masters remember where it ran: no worker needs naming.
    let ended = logs(&masters, &[&executor]);
    assert!(ended.status.success(), "{ended:?}");
    assert_eq!(ended.stdout, b"executor-up\nexecutor-done\n");
    let kept = &crate::support::app(&status, &app).unwrap()["ended_executors"];
    assert!(
        kept.as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == first && e["worker"] == worker && e["exit_code"] == 0),
        "{kept}"
    );

    // Malformed ids are bad input (exit 2); unknown ones are refused (exit 3); neither waits.
    let malformed = logs(&masters, &["not-an-id"]);
    assert_eq!(malformed.status.code(), Some(2), "{malformed:?}");
    assert!(stderr(&malformed).contains("APP_ID/EXECUTOR_ID"));
    let unknown = logs(&masters, &["driver-20260101000000-9999"]);
    assert_eq!(unknown.status.code(), Some(3), "{unknown:?}");
    assert!(stderr(&unknown).contains("is known"));
    let ended = logs(&masters, &[&format!("{app}/99")]);
    assert_eq!(ended.status.code(), Some(3), "{ended:?}");
    assert!(stderr(&ended).contains("name the worker that ran it"));
    let nowhere = logs(&masters, &["--worker", "w9", &format!("{app}/99")]);
    assert_eq!(nowhere.status.code(), Some(3), "{nowhere:?}");
    assert!(stderr(&nowhere).contains("unknown worker"));
}

#[test]
fn a_status_page_links_what_a_process_wrote_for_whoever_may_read_it() {
    let mut masters = Masters::start();
    let leader = masters.leader(0);
    // A follower serving the pages: it reads through the leader as `muster logs` does.
    let serving = (1..=3).find(|&id| id != leader as usize).unwrap();
    masters.running[serving - 1].take().unwrap().crash();
    let http = format!("127.0.0.1:{}", crate::support::free_port());
    masters.running[serving - 1] = Some(masters.spawn_from(
        serving,
        &crate::support::muster_binary(),
        &["--http", &http],
    ));
    let _worker = start_worker(&masters, "w1", 2);
    let id = submit(
        &masters,
        &["--", "/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2"],
    );
    wait_for(&masters, "the driver finished", |s| {
        driver(s, &id).is_some_and(|d| d["state"] == "FINISHED")
    });
    let get = |path: &str, headers: &[&str]| {
        let start = Instant::now();
        loop {
            if let Some(answer) = crate::support::https_request(&http, path, headers) {
                return answer;
            }
            assert!(
                start.elapsed() < crate::support::DEADLINE,
                "{http} serves no pages"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let page = get(&format!("/driver/{id}"), &[]).1;
    assert!(
        page.contains(&format!(r#"href="../logs/{id}?stream=stderr""#)),
        "{page}"
    );

    // Not signed in: the sign-in form, which posts the token, and nothing of the output.
    let (head, body) = get(&format!("/logs/{id}"), &[]);
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    assert!(
        body.contains(r#"<form method="post" action="/sign-in">"#)
            && body.contains("muster rest-token")
            && !body.contains("to-stdout")
            && !body.contains("spark://")
            && !body.contains("Refused"),
        "{body}"
    );
    // A token in the URL (and so in the browser's history) is not taken.
    let token = crate::support::stdout(&muster().arg("rest-token").output().unwrap());
    let token = token.trim();
    let (head, _) = get(&format!("/logs/{id}?token={token}"), &[]);
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    // Signing in keeps the token at the master: the browser's cookie names a session, and
    // it is sent back where it came from.
    let post = |path: &str, headers: &[&str], form: &str| {
        crate::support::https_post(&http, path, headers, form).expect("an answer")
    };
    let back = format!("%2Flogs%2F{id}%3Fstream%3Dstdout");
    let (head, _) = post("/sign-in", &[], &format!("token={token}&then={back}"));
    assert!(
        head.starts_with("HTTP/1.1 303")
            && head.contains(&format!("location: /logs/{id}?stream=stdout"))
            && head.contains("; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict; Secure")
            && !head.contains(token),
        "{head}"
    );
    let session = head
        .lines()
        .find_map(|line| line.strip_prefix("set-cookie: "))
        .and_then(|cookie| cookie.split(';').next())
        .unwrap()
        .to_owned();
    let cookie = format!("Cookie: {session}");
    let (head, body) = get(&format!("/logs/{id}"), &[&cookie]);
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("x-content-type-options: nosniff"),
        "{head}"
    );
    assert_eq!(body, "to-stdout\n");
    // A browser is given a page around it, which says which bytes it shows; a script may
    // ask for those from a byte on.
    let (_, page) = get(&format!("/logs/{id}"), &[&cookie, "Accept: text/html"]);
    assert!(
        page.contains("Bytes 0 to 10 of 10.")
            && page.contains("<pre>to-stdout\n</pre>")
            && page.contains(&format!(r#"<a href="/driver/{id}">"#)),
        "{page}"
    );
    let (_, body) = get(&format!("/logs/{id}?from=3"), &[&cookie]);
    assert_eq!(body, "stdout\n");
    // Another site's page may not sign a browser in.
    let (head, _) = post(
        "/sign-in",
        &["Sec-Fetch-Site: cross-site"],
        &format!("token={token}&then=%2F"),
    );
    assert!(
        head.starts_with("HTTP/1.1 403") && !head.contains("set-cookie"),
        "{head}"
    );
    // A token that lets nobody in is refused, saying why; and sends nobody elsewhere.
    let (head, body) = post(
        "/sign-in",
        &[],
        "token=e30.e30.e30&then=https%3A%2F%2Felsewhere",
    );
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    assert!(
        body.contains("Refused: Failed to verify the token") && !body.contains("elsewhere"),
        "{body}"
    );

    // Kill buttons: signed in, a running driver's page posts its kill with the session's
    // anti-forgery value; a form without it changes nothing.
    let running = submit(&masters, &["--", "/bin/sleep", "1000"]);
    wait_for(&masters, "the driver running", |s| {
        driver(s, &running).is_some_and(|d| d["state"] == "RUNNING")
    });
    let page = get(&format!("/driver/{running}"), &[]).1;
    assert!(page.contains("sign in to kill"), "{page}");
    let page = get(&format!("/driver/{running}"), &[&cookie]).1;
    let form_key = page
        .split(r#"name="form_key" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("a kill button: {page}"))
        .to_owned();
    let (head, _) = post(
        "/kill",
        &[&cookie],
        &format!("id={running}&form_key=forged&then=%2F"),
    );
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let (head, _) = post(
        "/kill",
        &[],
        &format!("id={running}&form_key={form_key}&then=%2F"),
    );
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    let (head, _) = post(
        "/kill",
        &[&cookie, "Origin: https://elsewhere.example"],
        &format!("id={running}&form_key={form_key}&then=%2F"),
    );
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert_eq!(
        driver(&masters.status(&masters.list_from(1)), &running).unwrap()["state"],
        "RUNNING"
    );
    let (head, _) = post(
        "/kill",
        &[&cookie],
        &format!("id={running}&form_key={form_key}&then=%2Fdriver%2F{running}"),
    );
    assert!(
        head.starts_with("HTTP/1.1 303") && head.contains(&format!("location: /driver/{running}")),
        "{head}"
    );
    wait_for(&masters, "the driver killed from its page", |s| {
        driver(s, &running).is_some_and(|d| d["state"] == "KILLED")
    });
    // A script kills with a bearer token and the id alone.
    let scripted = submit(&masters, &["--", "/bin/sleep", "1000"]);
    let bearer = format!("Authorization: Bearer {token}");
    let (head, _) = post("/kill", &[&bearer], &format!("id={scripted}"));
    assert!(head.starts_with("HTTP/1.1 303"), "{head}");
    wait_for(&masters, "the driver killed by a script", |s| {
        driver(s, &scripted).is_some_and(|d| d["state"] == "KILLED")
    });
    let (_, body) = get(&format!("/logs/{id}?stream=stderr"), &[&bearer]);
    assert_eq!(body, "to-stderr\n");

    // A named user reads only their own work's output.
    let dir = tempfile::tempdir().unwrap();
    let alice = dir.path().join("alice");
    crate::support::stdout(&Masters::client(
        &masters.list_from(1),
        &["users", "add", "alice", "--out", alice.to_str().unwrap()],
    ));
    let hers = crate::support::stdout(
        &muster()
            .args(["rest-token", "--secret-file", alice.to_str().unwrap()])
            .output()
            .unwrap(),
    );
    let (head, body) = get(
        &format!("/logs/{id}"),
        &[&format!("Authorization: Bearer {}", hers.trim())],
    );
    assert!(head.starts_with("HTTP/1.1 403"), "{head} {body}");
}

#[test]
fn a_worker_cleans_up_what_ended_processes_left_and_logs_say_so() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = crate::support::start_worker_via(
        &masters,
        "w1",
        2,
        &masters.list_from(1),
        &["--cleanup-ttl", "0", "--cleanup-interval", "1"],
    );
    let id = submit(&masters, &["--", "/bin/sh", "-c", "echo written"]);
    wait_for(&masters, "the driver finished", |s| {
        driver(s, &id).is_some_and(|d| d["state"] == "FINISHED")
    });
    let directory = masters.dir.path().join("w1").join(&id);
    let start = Instant::now();
    while directory.exists() {
        assert!(
            start.elapsed() < crate::support::DEADLINE,
            "{} stays",
            directory.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let gone = logs(&masters, &[&id]);
    assert_eq!(gone.status.code(), Some(3), "{gone:?}");
    assert!(
        stderr(&gone).contains("was cleaned up from this worker's work dir after it ended"),
        "{gone:?}"
    );
}
