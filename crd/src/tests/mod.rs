mod cel;
mod generated;
mod helpers;
mod pool_cel;
