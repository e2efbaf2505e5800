//! Connecting to Temporal: `--temporal HOST:PORT` and `--namespace` into a client of the Rust SDK.

use temporalio_client::{Client, ClientOptions, Connection, ConnectionOptions, Url};

/// Checks `HOST:PORT` and gives the gRPC URL for it.
pub fn target(addr: &str) -> Result<Url, String> {
    let shown = attestation::text::escape(addr);
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("--temporal {shown}: expected HOST:PORT"))?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!(
            "--temporal {shown}: expected HOST:PORT with a port from 1 to 65535"
        ));
    }
    Url::parse(&format!("http://{addr}")).map_err(|e| format!("--temporal {shown}: {e}"))
}

/// A client of the Temporal frontend at `addr` in `namespace`, identifying itself as `identity`.
pub async fn connect(addr: &str, namespace: &str, identity: &str) -> Result<Client, String> {
    let url = target(addr)?;
    let opts = ConnectionOptions::new(url)
        .identity(identity.to_owned())
        .build();
    let connection = Connection::connect(opts).await.map_err(|e| {
        format!(
            "--temporal {}: cannot connect: {e}",
            attestation::text::escape(addr)
        )
    })?;
    Client::new(connection, ClientOptions::new(namespace).build())
        .map_err(|e| format!("--namespace {}: {e}", attestation::text::escape(namespace)))
}

/// The state of the workflow of `run_id` as Temporal reports it (`running`, `completed`, `canceled`, ...), or why
/// it could not be read.
pub async fn workflow_state(client: &Client, run_id: &str) -> String {
    let handle = client.get_workflow_handle::<crate::workflow::PoolRun>(run_id.to_owned());
    match handle.describe(Default::default()).await {
        Ok(d) => {
            use temporalio_client::WorkflowExecutionStatus as S;
            match d.status() {
                S::Running => "running",
                S::Completed => "completed",
                S::Failed => "failed",
                S::Canceled => "canceled",
                S::Terminated => "terminated",
                S::ContinuedAsNew => "continued-as-new",
                S::TimedOut => "timed-out",
                S::Paused => "paused",
                _ => "unknown",
            }
            .to_owned()
        }
        Err(e) => format!("unknown ({})", attestation::text::escape(&e.to_string())),
    }
}

/// Checks a task queue's name: 1 to 100 of `A-Z a-z 0-9 - _ .` (so that no queue's name is another queue's
/// coordinator queue).
pub fn check_queue(queue: &str) -> Result<(), String> {
    let ok = !queue.is_empty()
        && queue.len() <= 100
        && queue
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "queue {}: use 1 to 100 of A-Z a-z 0-9 - _ .",
            attestation::text::escape(queue)
        ))
    }
}

/// The task queue the runs of `queue` have their workflow tasks on: only the coordinator polls it. Attempts go to
/// `queue` itself, which the execution hosts poll; a coordinator never takes an attempt, since the SDK's worker
/// that runs workflows with local activities also polls its own queue for activities.
pub fn coordinator_queue(queue: &str) -> String {
    format!("{queue}:coordinator")
}
