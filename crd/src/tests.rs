mod cel;
mod generated;
mod helpers;
