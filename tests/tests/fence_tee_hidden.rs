//! The attestation interfaces are invisible to the job's commands: inside the fence there is no `/sys` (so no
//! `/sys/kernel/config/tsm/report`, where the guest agent mounts configfs), `/dev` holds only the fence's own
//! nodes (so no `/dev/sev-guest`, `/dev/tdx_guest` or `/dev/sev`), and configfs cannot be mounted. The guest
//! agent runs this same fence, so what holds here holds for the job inside a VM.

use fenced_run_tests::fence::{skip, Case};

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

#[test]
fn report_interfaces_are_not_reachable_from_the_sandbox() {
    if skip() {
        return;
    }
    let c = Case::new(BIN);
    c.repo_file(
        "test.sh",
        "bad=0\n\
         for p in /sys /sys/kernel/config /sys/kernel/config/tsm/report /dev/sev-guest /dev/tdx_guest /dev/sev /dev/kvm; do\n\
           [ -e $p ] && { echo \"present: $p\"; bad=1; }\n\
         done\n\
         ls -A /dev > /tmp/dev.txt || bad=1\n\
         grep -qx null /tmp/dev.txt || { echo 'ls /dev did not list null'; bad=1; }\n\
         extra=$(grep -vxE 'null|zero|full|random|urandom|tty|fd|stdin|stdout|stderr|shm' /tmp/dev.txt)\n\
         [ -n \"$extra\" ] && { echo \"other /dev entries: $extra\"; bad=1; }\n\
         mkdir -p /tmp/cfg\n\
         mount -t configfs configfs /tmp/cfg 2>/dev/null && { echo 'configfs mounted'; bad=1; }\n\
         mount -t sysfs sysfs /tmp/cfg 2>/dev/null && { echo 'sysfs mounted'; bad=1; }\n\
         echo bad=$bad\n\
         [ $bad = 0 ] && echo '1 passed, 0 failed' || { echo '0 passed, 1 failed'; exit 1; }\n",
    );
    c.job(
        "[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\ntimeout_seconds = 60\n",
    );
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    c.assert_clean(&r, &[]);
}
