//! How a rank waits: [`wait`] spins, yields and then sleeps on a word of connection memory (a futex shared
//! between processes) until the peer moves it, the timeout passes or the communicator is aborted; [`doorbell`]
//! is the proxy thread's sleep on its sockets and an eventfd. Depends on nothing else in the runtime but its
//! error type.

pub(crate) mod doorbell;
pub mod wait;
